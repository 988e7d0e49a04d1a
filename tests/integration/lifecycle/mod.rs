//! The fourth round's rules about keys and plans: key expiry, scopes and rolling
//! (SPEC §15), rate limits per second (§16) and features per plan (§17), through the
//! real server.

mod entitlements;
mod keys;
mod rates;

pub use std::time::Duration;

pub use chrono::{DateTime, Utc};
pub use reqwest::Method;
pub use serde_json::{Value, json};

use crate::common::*;

pub const DAILY: &str = "/vedic/v1/horoscope/daily";
pub const SYNASTRY: &str = "/western/v1/synastry/report";

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

/// A new key of the session's account made with `body`: its id and the key.
pub async fn new_key(app: &TestApp, token: &str, body: Value) -> (i64, String) {
    let res = send(app, Method::POST, "/account/v1/keys", token, Some(body)).await;
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
