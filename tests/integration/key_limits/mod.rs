//! Per-key monthly limits (SPEC §13): set on creation or through PATCH, `used` per key,
//! `429 KEY_QUOTA_EXCEEDED` once a key's month is used up, the account's other keys
//! unaffected, and no overshoot across replicas.

mod api;
mod enforcement;
mod replicas;

pub use std::sync::Arc;
pub use std::time::Duration;

pub use chrono::Utc;
pub use reqwest::{Method, StatusCode};
pub use serde_json::{Value, json};
pub use tollgate::month::Month;

use crate::common::*;

pub const DAILY: &str = "/vedic/v1/horoscope/daily";

/// One account API request with a session and an optional JSON body.
pub async fn send(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

/// `PATCH /account/v1/keys/{key_id}` setting (or, with null, clearing) its limit.
pub async fn set_limit(app: &TestApp, token: &str, key_id: i64, limit: Value) -> reqwest::Response {
    let path = format!("/account/v1/keys/{key_id}");
    send(
        app,
        Method::PATCH,
        &path,
        token,
        Some(json!({ "monthly_limit": limit })),
    )
    .await
}

/// A new key of the session's account, with `body` as the creation request.
pub async fn new_key(app: &TestApp, token: &str, body: Option<Value>) -> (i64, String) {
    let res = send(app, Method::POST, "/account/v1/keys", token, body).await;
    assert_eq!(res.status(), 201);
    let body: Value = res.json().await.unwrap();
    (
        body["key_id"].as_i64().unwrap(),
        body["api_key"].as_str().unwrap().to_owned(),
    )
}

/// The key list's item of `key_id`.
pub async fn listed(app: &TestApp, token: &str, key_id: i64) -> Value {
    let res = send(app, Method::GET, "/account/v1/keys", token, None).await;
    assert_eq!(res.status(), 200);
    let keys: Vec<Value> = res.json().await.unwrap();
    keys.into_iter()
        .find(|k| k["key_id"] == key_id)
        .expect("the key is listed")
}

/// The key's `used` once it has reached `expected` (accounting is asynchronous).
pub async fn used_through(app: &TestApp, token: &str, key_id: i64, expected: i64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let key = listed(app, token, key_id).await;
        if key["used"] == expected {
            return key;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "used never reached {expected}: {key}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
