//! Which calls consume one: every upstream answer does, the gateway's own errors,
//! refusals and throttled calls do not.

use super::*;
use crate::common::*;

/// Stops the gateway (draining its queue), then checks nothing was accounted.
async fn assert_nothing_accounted(app: &mut TestApp, account_id: i64) {
    app.stop().await;
    assert_eq!(app.ledger_rows(account_id).await, 0);
    let now = Utc::now();
    let current = Month::containing(now).to_string();
    let used = report(&app.db.pool, account_id, &current, now).await.used;
    assert_eq!(used, 0);
}

#[tokio::test]
async fn every_upstream_status_consumes_a_call_5xx_included() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let (id, key) = (customer.account_id, &customer.api_key);
    assert_eq!(app.call("/vedic/v1/status/503", key).await.status(), 503);
    assert_eq!(app.call("/western/v1/status/404", key).await.status(), 404);
    app.wait_for_ledger(id, 2).await;

    let sql = "SELECT array_agg(upstream_status::int ORDER BY upstream_status)
               FROM subscription_tracking WHERE account_id = $1";
    let statuses: Vec<i32> = scalar(&app.db.pool, sql, id).await;
    assert_eq!(statuses, [404, 503]);
    let current = usage_json(&app.usage_of(id).await);
    assert_eq!(current, "free: 2 of 3000 used, 2998 left");
}

#[tokio::test]
async fn a_gateway_502_consumes_no_call() {
    // A bound socket that never listens: its port refuses connections, and no other
    // test can take it over (a dropped listener's port could be reused meanwhile).
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = reserved.local_addr().unwrap();
    let mut app = spawn_app_with(|c| c.upstream.base_url = format!("http://{closed}")).await;
    let customer = app.signup().await;
    let res = app.call(DAILY, &customer.api_key).await;
    assert_error(res, 502, "UPSTREAM_UNAVAILABLE").await;
    assert_nothing_accounted(&mut app, customer.account_id).await;
}

#[tokio::test]
async fn a_gateway_504_consumes_no_call() {
    let mut app = spawn_app_with(|c| c.upstream.timeout_ms = 300).await;
    let customer = app.signup().await;
    let res = app.call("/vedic/v1/slow/3000", &customer.api_key).await;
    assert_error(res, 504, "UPSTREAM_TIMEOUT").await;
    assert_nothing_accounted(&mut app, customer.account_id).await;
}

#[tokio::test]
async fn a_refused_key_consumes_no_call() {
    let mut app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let revoke = app.url(&format!("/account/v1/keys/{}", customer.key_id));
    let res = app.client.delete(revoke).bearer_auth(token).send().await;
    assert_eq!(res.unwrap().status(), 204);

    let res = app.call(DAILY, &customer.api_key).await;
    assert_error(res, 401, "INVALID_API_KEY").await;
    let res = app.client.get(app.url(DAILY)).send().await.unwrap();
    assert_error(res, 401, "INVALID_API_KEY").await;
    assert!(app.upstream.recorded().is_empty());
    assert_nothing_accounted(&mut app, customer.account_id).await;
}

#[tokio::test]
async fn throttled_calls_consume_nothing_and_admitted_ones_count_beyond_the_allowance() {
    let mut app = spawn_app_with(|c| c.usage.free_monthly_calls = 3).await;
    let customer = app.signup().await;
    let (id, key) = (customer.account_id, &customer.api_key);
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, key).await.status(), 200);
    }
    app.wait_for_ledger(id, 3).await;
    let throttler = &app.state.throttler;
    let marked = || std::future::ready(throttler.is_marked(id, Utc::now()));
    wait_until("exhaustion marker written", marked).await;

    // About 20% of calls are admitted; go on until both outcomes were seen.
    let (mut admitted, mut throttled) = (0, 0);
    while admitted == 0 || throttled == 0 {
        assert!(admitted + throttled < 200, "both outcomes expected");
        let res = app.call(DAILY, key).await;
        if res.status() == 200 {
            admitted += 1;
            continue;
        }
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["code"], "REQUEST_THROTTLED");
        assert_eq!(body["message"], "Request throttled. Please try again.");
        throttled += 1;
    }
    app.stop().await;
    let used = 3 + admitted;
    assert_eq!(app.ledger_rows(id).await, used);
    assert_eq!(app.upstream.recorded().len() as i64, used);
    let now = Utc::now();
    let current = Month::containing(now).to_string();
    let over = usage(&app.db.pool, id, &current, now).await;
    assert_eq!(over, format!("free: {used} of 3 used, 0 left, exhausted"));
}
