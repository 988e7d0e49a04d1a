//! What operators use: health, readiness (also with the database down), the OpenAPI
//! document and the metrics listener.

use serde_json::Value;

use crate::common::*;

async fn get(app: &TestApp, path: &str) -> reqwest::Response {
    app.client.get(app.url(path)).send().await.unwrap()
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
        "/admin/v1/reload",
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
    assert_error(res, 503, "SERVICE_UNAVAILABLE").await;
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
