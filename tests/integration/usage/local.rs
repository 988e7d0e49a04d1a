//! Local mode: keys still required, calls forwarded, nothing metered, history readable.

use serde_json::json;

use super::*;
use crate::common::*;

fn local_mode(config: &mut tollgate::Config) {
    config.usage_check.enabled = false;
    config.throttle.enabled = false;
}

#[tokio::test]
async fn local_mode_requires_keys_forwards_calls_and_meters_nothing() {
    let mut app = spawn_app_with(local_mode).await;
    assert!(app.accountant.is_none() && !app.state.usage.enabled());
    let customer = app.signup().await;
    let (id, db) = (customer.account_id, app.db.clone());
    let pool = &db.pool;
    let res = app.client.get(app.url(DAILY)).send().await.unwrap();
    assert_error(res, 401, "INVALID_API_KEY").await;
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    assert_eq!(app.upstream.recorded().len(), 1);

    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    let body = json!({"plan": "pro", "monthly_allowance": 10});
    assert_eq!(app.admin_post(&path, &body).await.status(), 201);
    assert!(snapshots(pool, id, ALL).await.is_empty(), "no snapshots");

    let now = Utc::now();
    let direct = Accountant::new(pool.clone(), FREE, false, Throttler::disabled());
    let outcome = direct.account(&[event(id, now)], now).await.unwrap();
    assert_eq!((outcome.ignored, outcome.accounted), (1, 0));
    app.stop().await;
    assert_eq!(app.ledger_rows(id).await, 0);
    let counters = "SELECT count(*) FROM usage_counter WHERE account_id = $1";
    assert_eq!(scalar::<i64>(pool, counters, id).await, 0);
}

#[tokio::test]
async fn local_mode_keeps_usage_history_readable() {
    let app = spawn_app_with(local_mode).await;
    let customer = app.signup().await;
    let (id, pool) = (customer.account_id, &app.db.pool);
    // Rows inserted by hand need their month's partition first.
    let partition = "SELECT subscription_tracking_add_month('2026-10-01T00:00Z')";
    sqlx::query(partition).execute(pool).await.unwrap();
    let sql = "INSERT INTO subscription_tracking
                   (transaction_id, account_id, occurred_at, method, route, upstream_status)
               SELECT gen_random_uuid(), $1, '2026-10-01T00:00Z'::timestamptz + n * interval '1h',
                      'GET', '/vedic/v1/x', 200
               FROM generate_series(1, 42) n";
    sqlx::query(sql).bind(id).execute(pool).await.unwrap();
    set_counter(pool, id, "2026-10", 42).await;

    let url = app.url("/account/v1/usage?month=2026-10");
    let res = app.client.get(url).header("x-api-key", &customer.api_key);
    let res = res.send().await.unwrap();
    assert_eq!(res.status(), 200);
    let october: Value = res.json().await.unwrap();
    assert_eq!(october["month_start"], "2026-10-01T00:00:00Z");
    assert_eq!(usage_json(&october), "free: 42 of 3000 used, 2958 left");
}
