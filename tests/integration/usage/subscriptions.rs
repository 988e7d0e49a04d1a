//! Subscriptions: the instants they start and stop at, which one a call goes to, the
//! fall-back to the free grant, and an upgrade in the middle of a month.

use serde_json::json;

use super::*;
use crate::common::*;

#[tokio::test]
async fn a_subscription_counts_from_its_start_instant_inclusive() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let start = "2026-11-10T00:00:00Z";
    let pro = subscribe(pool, id, PRO, (start, None), "2026-11-05T00:00:00Z").await;
    let before = event(id, at("2026-11-09T23:59:59.999Z"));
    let from = event(id, at(start));
    account(pool, &[before.clone(), from.clone()], at(start)).await;

    assert_eq!(charged_to(pool, &before).await, Some(free));
    assert_eq!(charged_to(pool, &from).await, Some(pro));
    let just_before = usage(pool, id, "2026-11", before.occurred_at).await;
    assert_eq!(just_before, "free: 2 of 3000 used, 2998 left");
    let from_start = usage(pool, id, "2026-11", at(start)).await;
    assert_eq!(from_start, "pro: 2 of 10000 used, 9998 left");
}

#[tokio::test]
async fn a_subscription_stops_at_its_expiry_instant_exclusive() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (start, expiry) = ("2026-11-10T00:00:00Z", "2026-12-10T00:00:00Z");
    let pro = subscribe(pool, id, PRO, (start, Some(expiry)), start).await;
    let last = event(id, at("2026-12-09T23:59:59.999Z"));
    let gone = event(id, at(expiry));
    account(pool, &[last.clone(), gone.clone()], at(expiry)).await;

    assert_eq!(charged_to(pool, &last).await, Some(pro));
    assert_eq!(charged_to(pool, &gone).await, Some(free));
    let still = usage(pool, id, "2026-12", last.occurred_at).await;
    assert_eq!(still, "pro: 2 of 10000 used, 9998 left");
    let expired = usage(pool, id, "2026-12", at(expiry)).await;
    assert_eq!(expired, "free: 2 of 3000 used, 2998 left");
}

#[tokio::test]
async fn subscriptions_starting_at_the_same_instant_go_to_the_newest() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let start = "2026-11-10T00:00:00Z";
    let older = subscribe(pool, id, ("max", 90_000), (start, None), start).await;
    let newer = subscribe(pool, id, ("basic", 5_000), (start, None), start).await;
    assert!(newer > older);
    let now = at("2026-11-20T12:00:00Z");
    let call = event(id, now);
    account(pool, std::slice::from_ref(&call), now).await;

    assert_eq!(charged_to(pool, &call).await, Some(newer));
    let november = usage(pool, id, "2026-11", now).await;
    assert_eq!(november, "basic: 1 of 5000 used, 4999 left");
}

#[tokio::test]
async fn an_expired_subscription_falls_back_to_the_free_grant() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-09-20T08:00:00Z").await;
    let (start, expiry) = ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z");
    subscribe(pool, id, PRO, (start, Some(expiry)), start).await;
    let now = at("2026-12-15T12:00:00Z");
    let unused = usage(pool, id, "2026-12", now).await;
    assert_eq!(unused, "free: 0 of 3000 used, 3000 left");

    let call = event(id, now);
    account(pool, std::slice::from_ref(&call), now).await;
    assert_eq!(charged_to(pool, &call).await, Some(free));
    let december = usage(pool, id, "2026-12", now).await;
    assert_eq!(december, "free: 1 of 3000 used, 2999 left");
    let grants = snapshots(pool, id, "2026-12").await;
    assert_eq!(grants, [snap(free, "2026-12", FREE, true)]);
}

#[tokio::test]
async fn an_upgrade_mid_month_keeps_the_calls_already_used() {
    let app = spawn_app().await;
    let id = app.signup().await.account_id;
    let now = Utc::now();
    let listener = app.accountant.clone().expect("metering on");
    let outcome = listener.account(&events(id, now, FREE), now).await.unwrap();
    assert_eq!(outcome.exhausted, [id]);
    let used_up = usage_json(&app.usage_of(id).await);
    assert_eq!(used_up, "free: 3000 of 3000 used, 0 left, exhausted");
    let throttler = &app.state.throttler;
    let marked = || std::future::ready(throttler.is_marked(id, Utc::now()));
    wait_until("exhaustion marker written", marked).await;

    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    let body = json!({"plan": "pro", "monthly_allowance": 10_000});
    let res = app.admin_post(&path, &body).await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    assert!(created["subscription_id"].is_i64(), "{created}");
    assert_eq!(
        (created["plan"].as_str(), created["account_id"].as_i64()),
        (Some("pro"), Some(id))
    );
    let upgraded = usage_json(&app.usage_of(id).await);
    assert_eq!(upgraded, "pro: 3000 of 10000 used, 7000 left");
    assert!(!throttler.is_marked(id, Utc::now()), "marker removed");
}
