//! The account API: signup, login, keys, and what bad input gets back.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn get(app: &TestApp, path: &str) -> reqwest::Response {
    app.client.get(app.url(path)).send().await.unwrap()
}

async fn list_keys(app: &TestApp, token: &str) -> Value {
    let res = with_session(app, Method::GET, "/account/v1/keys", token).await;
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

/// One request on the account API with a login session.
async fn with_session(app: &TestApp, method: Method, path: &str, token: &str) -> reqwest::Response {
    app.client
        .request(method, app.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// Asserts a JSON error with this status and code.
async fn expect_error(res: reqwest::Response, status: StatusCode, code: &str) {
    assert_eq!(error_code(res).await, (status, code.to_owned()));
}

async fn error_code(res: reqwest::Response) -> (StatusCode, String) {
    let status = res.status();
    let body: Value = res.json().await.expect("error bodies are JSON");
    assert!(body["message"].is_string(), "{body}");
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn signup_returns_integer_ids_and_a_prefixed_key_stored_only_as_a_hash() {
    let app = spawn_app().await;
    let res = app
        .post_json(
            "/account/v1/signup",
            &json!({"email": "Ann@Example.com", "password": "s3cure-enough"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let body: Value = res.json().await.unwrap();
    assert!(
        body["account_id"].is_i64() && body["key_id"].is_i64(),
        "{body}"
    );
    let key = body["api_key"].as_str().unwrap();
    assert!(key.starts_with("tgk_") && key.len() >= 36, "{key}");

    let stored: Vec<(Vec<u8>, String)> = sqlx::query_as("SELECT key_hash, prefix FROM api_key")
        .fetch_all(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    use sha2::Digest;
    assert_eq!(stored[0].0, sha2::Sha256::digest(key.as_bytes()).to_vec());
    assert!(key.starts_with(&stored[0].1) && stored[0].1.len() < 16);
    let password: String = sqlx::query_scalar("SELECT password_hash FROM account")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert!(password.starts_with("$argon2id$"));
}

#[tokio::test]
async fn signup_allocates_the_free_grant_of_the_current_month() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let grants: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT allowance, is_free FROM monthly_usage
         WHERE account_id = $1 AND month_start = date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
    )
    .bind(customer.account_id)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(grants, vec![(3000, true)]);
    let usage = app.usage_of(customer.account_id).await;
    assert_eq!(usage["plan"], "free");
    assert_eq!(usage["allowance"], 3000);
    assert_eq!(usage["used"], 0);
    assert_eq!(usage["remaining"], 3000);
    assert_eq!(usage["exhausted"], false);
}

#[tokio::test]
async fn the_same_email_in_any_case_cannot_sign_up_twice() {
    let app = spawn_app().await;
    let body = json!({"email": "bob@example.com", "password": "long enough"});
    assert_eq!(
        app.post_json("/account/v1/signup", &body).await.status(),
        201
    );
    let again = json!({"email": " BOB@example.com ", "password": "other password"});
    let (status, code) = error_code(app.post_json("/account/v1/signup", &again).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "EMAIL_TAKEN")
    );
}

#[tokio::test]
async fn concurrent_signups_with_one_email_create_one_account() {
    let app = spawn_app().await;
    let body = json!({"email": "race@example.com", "password": "long enough"});
    let attempts =
        futures_util::future::join_all((0..5).map(|_| app.post_json("/account/v1/signup", &body)))
            .await;
    let created = attempts.iter().filter(|r| r.status() == 201).count();
    let taken = attempts.iter().filter(|r| r.status() == 409).count();
    assert_eq!((created, taken), (1, 4));
}

#[tokio::test]
async fn invalid_signups_are_refused_with_validation_failed() {
    let app = spawn_app().await;
    for body in [
        json!({"email": "not-an-email", "password": "long enough"}),
        json!({"email": "a@example.com", "password": "short"}),
        json!({"email": "a@example.com"}),
        json!({"email": 42, "password": "long enough"}),
        json!({"email": "a\0b@example.com", "password": "long enough"}),
        json!("a@example.com"),
    ] {
        let (status, code) = error_code(app.post_json("/account/v1/signup", &body).await).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn malformed_bodies_get_json_errors_never_a_500() {
    let app = spawn_app().await;
    let url = app.url("/account/v1/signup");
    let cases: Vec<(reqwest::RequestBuilder, StatusCode, &str)> = vec![
        (
            app.client
                .post(&url)
                .header("content-type", "application/json")
                .body("{\"email\": "),
            StatusCode::BAD_REQUEST,
            "MALFORMED_JSON",
        ),
        (
            app.client
                .post(&url)
                .header("content-type", "text/plain")
                .body("{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            app.client.post(&url).body("{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            app.client
                .post(&url)
                .header("content-type", "application/json")
                .body(format!(
                    "{{\"email\": \"{}\", \"password\": \"x\"}}",
                    "a".repeat(64 * 1024)
                )),
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            app.client
                .post(&url)
                .header("content-type", "application/json")
                .body(vec![0xff, 0xfe, 0x7b]),
            StatusCode::BAD_REQUEST,
            "MALFORMED_JSON",
        ),
    ];
    for (request, status, code) in cases {
        let res = request.send().await.unwrap();
        assert_eq!(error_code(res).await, (status, code.to_owned()));
    }
    let res = app.client.get(&url).send().await.unwrap();
    // A known path with another method is not a route of the API.
    expect_error(res, StatusCode::NOT_FOUND, "NOT_FOUND").await;
}

#[tokio::test]
async fn login_gives_an_expiring_session_and_refuses_wrong_credentials() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app
        .post_json(
            "/account/v1/login",
            &json!({"email": customer.email, "password": customer.password}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert!(body["token"].as_str().unwrap().starts_with("tgs_"));
    let expires: chrono::DateTime<chrono::Utc> =
        body["expires_at"].as_str().unwrap().parse().unwrap();
    let hours = (expires - chrono::Utc::now()).num_minutes() as f64 / 60.0;
    assert!((23.9..=24.0).contains(&hours), "{hours}");

    for body in [
        json!({"email": customer.email, "password": "wrong password"}),
        json!({"email": "nobody@example.com", "password": customer.password}),
        json!({"email": "nul\0@example.com", "password": customer.password}),
    ] {
        let (status, code) = error_code(app.post_json("/account/v1/login", &body).await).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNAUTHORIZED, "INVALID_CREDENTIALS")
        );
    }
}

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
    expect_error(res, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
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
    expect_error(refused, StatusCode::UNAUTHORIZED, "INVALID_API_KEY").await;
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
    expect_error(res, StatusCode::NOT_FOUND, "KEY_NOT_FOUND").await;
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
        assert_eq!(
            error_code(res).await,
            (StatusCode::UNAUTHORIZED, "UNAUTHORIZED".into()),
            "{auth:?}"
        );
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
async fn the_admin_api_needs_its_token_and_vanishes_without_one() {
    let app = spawn_app().await;
    let res = app
        .client
        .post(app.url("/admin/v1/reconcile"))
        .send()
        .await
        .unwrap();
    expect_error(res, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
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
    expect_error(res, StatusCode::NOT_FOUND, "NOT_FOUND").await;
}

#[tokio::test]
async fn health_readiness_and_the_openapi_document_are_served() {
    let app = spawn_app().await;
    assert_eq!(get(&app, "/healthz").await.status(), 200);
    assert_eq!(get(&app, "/readyz").await.status(), 200);
    let doc: Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/account/v1/signup",
        "/account/v1/login",
        "/account/v1/usage",
        "/account/v1/keys",
        "/account/v1/keys/{key_id}",
        "/admin/v1/accounts/{account_id}/subscriptions",
        "/admin/v1/accounts/{account_id}/usage",
        "/admin/v1/reconcile",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
}

#[tokio::test]
async fn readiness_fails_and_proxied_calls_get_503_when_the_database_is_down() {
    let db = std::sync::Arc::new(TestDb::new().await);
    let upstream = std::sync::Arc::new(
        tollgate_testkit::upstream::UpstreamServer::start()
            .await
            .unwrap(),
    );
    let config = test_config(&db, &upstream);
    let dead = tollgate::db::connect_lazy(
        &secrecy::SecretString::from("postgres://postgres@127.0.0.1:1/none"),
        2,
        std::time::Duration::from_millis(500),
    )
    .unwrap();
    let app = spawn_with_pool(db, upstream, config, dead).await;
    assert_eq!(get(&app, "/healthz").await.status(), 200);
    assert_eq!(get(&app, "/readyz").await.status(), 503);
    let res = app
        .call(
            "/vedic/v1/x",
            "tgk_0123456789012345678901234567890123456789",
        )
        .await;
    assert_eq!(
        error_code(res).await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "SERVICE_UNAVAILABLE".into()
        )
    );
    assert!(app.upstream.recorded().is_empty());
}

#[tokio::test]
async fn metrics_are_served_on_their_own_listener_only() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    app.call("/vedic/v1/x", &customer.api_key).await;
    assert_eq!(get(&app, "/metrics").await.status(), 404);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, tollgate::http::metrics_router()).await });
    let text = app
        .client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("tollgate_http_requests_total"), "{text}");
    assert!(
        text.contains("tollgate_upstream_duration_seconds"),
        "{text}"
    );
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
        expect_error(res, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    }
    let res = with_session(&app, Method::GET, "/account/v1/usage?month=", &token).await;
    expect_error(res, StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED").await;
}

#[tokio::test]
async fn ids_that_are_not_numbers_name_nothing() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let res = app.admin_get("/admin/v1/accounts/abc/usage").await;
    expect_error(res, StatusCode::NOT_FOUND, "ACCOUNT_NOT_FOUND").await;
    let res = app
        .admin_post(
            "/admin/v1/accounts/99999999999999999999/subscriptions",
            &json!({"plan": "pro", "monthly_allowance": 1}),
        )
        .await;
    expect_error(res, StatusCode::NOT_FOUND, "ACCOUNT_NOT_FOUND").await;
    let res = with_session(&app, Method::DELETE, "/account/v1/keys/abc", &token).await;
    expect_error(res, StatusCode::NOT_FOUND, "KEY_NOT_FOUND").await;
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
    expect_error(res, StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED").await;
}

#[tokio::test]
async fn an_empty_admin_token_means_no_admin_api() {
    let app = spawn_app_with(|c| c.admin.token = None).await;
    for (method, path) in [
        ("GET", "/admin/v1/reconcile"),
        ("POST", "/admin/v1/reconcile"),
        ("GET", "/admin/v1/accounts/1/usage"),
    ] {
        let res = app
            .client
            .request(method.parse().unwrap(), app.url(path))
            .bearer_auth("")
            .send()
            .await
            .unwrap();
        assert_eq!(
            error_code(res).await,
            (StatusCode::NOT_FOUND, "NOT_FOUND".into()),
            "{method} {path}"
        );
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
