//! The audit log (SPEC §19) through the real server: each change of keys,
//! subscriptions, top-ups, redemptions and payments writes one row with its actor,
//! action, target and client address, in the change's own transaction; a failed change
//! writes none; no secret is ever in a row; pages run newest first; an account reads
//! only its own events.

mod paging;
mod records;
mod refusals;

pub use reqwest::Method;
pub use serde_json::{Value, json};

use crate::common::*;

/// The address requests claim through `X-Forwarded-For` in these tests.
pub const FORWARDED: &str = "203.0.113.7";

/// A gateway that trusts the tests' loopback as its proxy, so `X-Forwarded-For` names
/// the client, with `adjust` applied after.
pub async fn audit_app(adjust: impl FnOnce(&mut tollgate::Config)) -> TestApp {
    spawn_app_with(|c| {
        c.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
        adjust(c);
    })
    .await
}

/// One account API request with a session, from [`FORWARDED`], with an optional body.
pub async fn send(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = app
        .client
        .request(method, app.url(path))
        .bearer_auth(token)
        .header("x-forwarded-for", FORWARDED);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

/// An admin API GET of `/admin/v1/audit` with `query`; asserts 200.
pub async fn admin_audit(app: &TestApp, query: &str) -> Value {
    let res = app.admin_get(&format!("/admin/v1/audit{query}")).await;
    assert_eq!(res.status(), 200, "{query}: {}", res.text().await.unwrap());
    res.json().await.unwrap()
}

/// Every event of `account_id`, newest first (at most 200).
pub async fn events_of(app: &TestApp, account_id: i64) -> Vec<Value> {
    let page = admin_audit(app, &format!("?account_id={account_id}&limit=200")).await;
    page["events"].as_array().unwrap().clone()
}

/// The events of `account_id` with `action`, newest first.
pub async fn actions_of(app: &TestApp, account_id: i64, action: &str) -> Vec<Value> {
    events_of(app, account_id)
        .await
        .into_iter()
        .filter(|e| e["action"] == action)
        .collect()
}

/// The one event of `account_id` with `action`; panics unless there is exactly one.
pub async fn the_event(app: &TestApp, account_id: i64, action: &str) -> Value {
    let mut found = actions_of(app, account_id, action).await;
    assert_eq!(found.len(), 1, "{action}: {found:?}");
    found.remove(0)
}

/// Rows in the table, read directly.
pub async fn rows(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM audit_event")
        .fetch_one(&app.db.pool)
        .await
        .unwrap()
}

/// Asserts `event` is `actor`'s `action` on `target`, from `ip`, at an RFC 3339 UTC
/// instant.
pub fn assert_event(event: &Value, actor: &str, action: &str, target: &str, ip: Option<&str>) {
    assert_eq!(event["actor"], actor, "{event}");
    assert_eq!(event["action"], action, "{event}");
    assert_eq!(event["target"], target, "{event}");
    assert_eq!(event["ip"], json!(ip), "{event}");
    let at = event["at"].as_str().unwrap();
    assert!(at.ends_with('Z'), "{event}");
    assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{event}");
    assert!(event["id"].as_i64().unwrap() > 0, "{event}");
    assert!(event["detail"].is_object(), "{event}");
}
