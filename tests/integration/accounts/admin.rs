//! The admin API: its token, ids that name nothing, and text the database refuses.

use reqwest::Method;
use serde_json::json;

use super::with_session;
use crate::common::*;

#[tokio::test]
async fn the_admin_api_needs_its_token_and_vanishes_without_one() {
    let app = spawn_app().await;
    let res = app
        .client
        .post(app.url("/admin/v1/reconcile"))
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
    let res = app
        .client
        .post(app.url("/admin/v1/reconcile"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);

    let closed = spawn_app_with(|c| c.admin.token = None).await;
    let res = closed
        .client
        .post(closed.url("/admin/v1/reconcile"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_error(res, 404, "NOT_FOUND").await;
}

/// `GET /admin/v1/accounts` from `client` with `token`.
async fn list_accounts(app: &TestApp, client: &reqwest::Client, token: &str) -> reqwest::Response {
    client
        .get(app.url("/admin/v1/accounts"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn ten_wrong_admin_tokens_from_an_address_shut_it_out_across_the_fleet() {
    let app = spawn_app().await;
    let config = app.state.config.as_ref().clone();
    let replica = spawn_replica(app.db.clone(), app.upstream.clone(), config).await;
    let guesser = super::limits::client_from("127.0.0.2");
    for i in 0..10 {
        let target = if i % 2 == 0 { &app } else { &replica };
        let res = list_accounts(target, &guesser, &format!("guess-{i}")).await;
        assert_error(res, 401, "UNAUTHORIZED").await;
    }
    for target in [&app, &replica] {
        let res = list_accounts(target, &guesser, "guess-11").await;
        let retry_after = super::limits::expect_too_many(res).await;
        assert!(retry_after <= 360, "{retry_after}");
        // Even the right token is refused from there: a guess past the limit learns nothing.
        let res = list_accounts(target, &guesser, ADMIN_TOKEN).await;
        super::limits::expect_too_many(res).await;
    }
    // The operator's own address is unaffected.
    let operator = super::limits::client_from("127.0.0.3");
    assert_eq!(
        list_accounts(&app, &operator, ADMIN_TOKEN).await.status(),
        200
    );
}

#[tokio::test]
async fn the_admin_failure_limit_follows_its_setting() {
    let app = spawn_app_with(|c| c.admin.failures_per_hour = 2).await;
    let guesser = super::limits::client_from("127.0.0.2");
    for _ in 0..2 {
        assert_eq!(list_accounts(&app, &guesser, "wrong").await.status(), 401);
    }
    super::limits::expect_too_many(list_accounts(&app, &guesser, "wrong").await).await;
}

#[tokio::test]
async fn ids_that_are_not_numbers_name_nothing() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let res = app.admin_get("/admin/v1/accounts/abc/usage").await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
    let res = app
        .admin_post(
            "/admin/v1/accounts/99999999999999999999/subscriptions",
            &json!({"plan": "pro", "monthly_allowance": 1}),
        )
        .await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
    let res = with_session(&app, Method::DELETE, "/account/v1/keys/abc", &token).await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
}

#[tokio::test]
async fn text_the_database_cannot_store_is_a_validation_error_not_a_500() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
            &json!({"plan": "p\0", "monthly_allowance": 10}),
        )
        .await;
    assert_error(res, 422, "VALIDATION_FAILED").await;
}

#[tokio::test]
async fn an_empty_admin_token_means_no_admin_api() {
    let app = spawn_app_with(|c| c.admin.token = None).await;
    for (method, path) in [
        ("GET", "/admin/v1/reconcile"),
        ("POST", "/admin/v1/reconcile"),
        ("POST", "/admin/v1/reload"),
        ("GET", "/admin/v1/accounts/1/usage"),
    ] {
        let res = app
            .client
            .request(method.parse().unwrap(), app.url(path))
            .bearer_auth("")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 404, "{method} {path}");
        assert_error(res, 404, "NOT_FOUND").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = tollgate::config::Config::load(&tollgate::config::Sources {
        dir: dir.path().to_owned(),
        env: vec![("TOLLGATE__ADMIN__TOKEN".into(), "".into())],
        ..Default::default()
    })
    .unwrap();
    assert!(config.admin.token.is_none());
}
