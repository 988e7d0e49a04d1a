//! API keys: created, listed without their secret, revoked, only by their owner.

use reqwest::Method;
use serde_json::Value;

use super::with_session;
use crate::common::*;

async fn list_keys(app: &TestApp, token: &str) -> Value {
    let res = with_session(app, Method::GET, "/account/v1/keys", token).await;
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

#[tokio::test]
async fn keys_are_created_listed_without_their_secret_and_revoked() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;

    let res = with_session(&app, Method::POST, "/account/v1/keys", &token).await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    let second_key = created["api_key"].as_str().unwrap().to_owned();
    let second_id = created["key_id"].as_i64().unwrap();
    assert_eq!(app.call("/western/v1/x", &second_key).await.status(), 200);

    let listed: Value = list_keys(&app, &token).await;
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["key_id"], customer.key_id);
    assert_eq!(listed[1]["key_id"], second_id);
    assert!(listed[1]["revoked_at"].is_null());
    assert!(second_key.starts_with(listed[1]["prefix"].as_str().unwrap()));
    assert!(!listed.iter().any(|k| k.to_string().contains(&second_key)));

    let res = with_session(
        &app,
        Method::DELETE,
        &format!("/account/v1/keys/{second_id}"),
        &token,
    )
    .await;
    assert_eq!(res.status(), 204);
    let refused = app.call("/western/v1/x", &second_key).await;
    assert_error(refused, 401, "INVALID_API_KEY").await;
    assert_eq!(
        app.call("/western/v1/x", &customer.api_key).await.status(),
        200,
        "other key unaffected"
    );

    let listed: Value = list_keys(&app, &token).await;
    assert!(listed[1]["revoked_at"].is_string());
}

#[tokio::test]
async fn a_customer_cannot_revoke_another_customers_key() {
    let app = spawn_app().await;
    let alice = app.signup().await;
    let bob = app.signup().await;
    let token = app.login(&alice).await;
    let res = with_session(
        &app,
        Method::DELETE,
        &format!("/account/v1/keys/{}", bob.key_id),
        &token,
    )
    .await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
    assert_eq!(app.call("/vedic/v1/x", &bob.api_key).await.status(), 200);
    let res = with_session(
        &app,
        Method::DELETE,
        "/account/v1/keys/not-a-number",
        &token,
    )
    .await;
    assert_eq!(res.status(), 404);
}
