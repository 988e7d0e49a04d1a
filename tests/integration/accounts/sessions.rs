//! Login sessions and API keys as credentials of the account API: expiry, refusal of
//! anything else, and the purge of long-expired sessions.

use reqwest::Method;

use super::with_session;
use crate::common::*;

#[tokio::test]
async fn an_expired_session_is_unauthorized() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    sqlx::query("UPDATE account_session SET expires_at = now() - interval '1 second'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    let res = with_session(&app, Method::GET, "/account/v1/keys", &token).await;
    assert_error(res, 401, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn session_routes_refuse_missing_or_wrong_tokens() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    for auth in [
        None,
        Some("Bearer nonsense"),
        Some("Basic abc"),
        Some(customer.api_key.as_str()),
    ] {
        let mut req = app.client.get(app.url("/account/v1/keys"));
        if let Some(value) = auth {
            req = req.header("authorization", value);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401, "{auth:?}");
        assert_error(res, 401, "UNAUTHORIZED").await;
    }
    // An API key is not a session.
    let res = app
        .client
        .post(app.url("/account/v1/keys"))
        .header("x-api-key", &customer.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
}

#[tokio::test]
async fn usage_takes_a_session_or_a_key_and_refuses_bad_ones_as_unauthorized() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let by_session = with_session(&app, Method::GET, "/account/v1/usage", &token).await;
    assert_eq!(by_session.status(), 200);
    let by_key = app
        .client
        .get(app.url("/account/v1/usage"))
        .header("X-API-KEY", &customer.api_key)
        .header("authorization", "Basic dXNlcjpwYXNz")
        .send()
        .await
        .unwrap();
    assert_eq!(
        by_key.status(),
        200,
        "a non-bearer Authorization does not hide the key"
    );
    for bad in ["tgk_0000000000000000000000000000000000000000", "junk"] {
        let res = app
            .client
            .get(app.url("/account/v1/usage"))
            .header("x-api-key", bad)
            .send()
            .await
            .unwrap();
        assert_error(res, 401, "UNAUTHORIZED").await;
    }
    let res = with_session(&app, Method::GET, "/account/v1/usage?month=", &token).await;
    assert_error(res, 422, "VALIDATION_FAILED").await;
}

#[tokio::test]
async fn sessions_long_expired_are_purged_and_live_ones_kept() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let live = app.login(&customer).await;
    let stale = app.login(&customer).await;
    sqlx::query(
        "UPDATE account_session SET expires_at = now() - interval '2 days'
         WHERE token_hash = sha256(convert_to($1, 'UTF8'))",
    )
    .bind(&stale)
    .execute(&app.db.pool)
    .await
    .unwrap();
    let purged = tollgate::auth::session::purge_expired(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(purged, 1);
    let res = with_session(&app, Method::GET, "/account/v1/keys", &live).await;
    assert_eq!(res.status(), 200);
}
