//! Answers that carry a secret (an API key, a session token, redemption codes) are never
//! kept by a cache (SPEC §21): `Cache-Control: no-store`.

use reqwest::Method;
use serde_json::json;

use super::with_session;
use crate::common::*;

fn assert_no_store(res: &reqwest::Response, what: &str) {
    assert_eq!(
        res.headers()
            .get("cache-control")
            .map(|v| v.to_str().unwrap()),
        Some("no-store"),
        "{what}"
    );
}

#[tokio::test]
async fn signup_login_key_creation_and_code_minting_are_not_cached() {
    let app = spawn_app_with(crate::billing::with_catalogue).await;
    let res = app
        .post_json(
            "/account/v1/signup",
            &json!({"email": "cache@example.com", "password": "correct horse battery"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    assert_no_store(&res, "signup");

    let res = app
        .post_json(
            "/account/v1/login",
            &json!({"email": "cache@example.com", "password": "correct horse battery"}),
        )
        .await;
    assert_eq!(res.status(), 200);
    assert_no_store(&res, "login");
    let token = res.json::<serde_json::Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();

    let res = with_session(&app, Method::POST, "/account/v1/keys", &token).await;
    assert_eq!(res.status(), 201);
    assert_no_store(&res, "key creation");

    let res = app
        .admin_post(
            "/admin/v1/codes",
            &json!({"plan": "pro", "months": 1, "count": 1, "expires_at": null}),
        )
        .await;
    assert_eq!(res.status(), 201);
    assert_no_store(&res, "code minting");

    // Refusals of those routes too: nothing under the JSON APIs is cached.
    let res = app
        .post_json(
            "/account/v1/login",
            &json!({"email": "cache@example.com", "password": "wrong password"}),
        )
        .await;
    assert_eq!(res.status(), 401);
    assert_no_store(&res, "a refused login");
}
