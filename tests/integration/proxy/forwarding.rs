//! What reaches the upstream and what comes back: the key swapped for the shared
//! secret, method, path, query and body intact, the request id, forwarding headers.

use std::time::Duration;

use serde_json::Value;

use super::assert_request_id;
use crate::common::*;

#[tokio::test]
async fn the_customer_key_is_swapped_for_the_shared_secret_and_never_forwarded() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app
        .call(
            "/vedic/v1/horoscope/daily?sign=leo&day=1",
            &customer.api_key,
        )
        .await;
    assert_eq!(res.status(), 200);
    let seen = app.upstream.recorded();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/vedic/v1/horoscope/daily");
    assert_eq!(seen[0].query.as_deref(), Some("sign=leo&day=1"));
    assert_eq!(seen[0].headers.get_all("x-api-key").iter().count(), 1);
    assert_eq!(seen[0].headers["x-api-key"], SHARED_SECRET);
    assert!(
        !seen[0]
            .headers
            .values()
            .any(|v| v.as_bytes() == customer.api_key.as_bytes()),
        "the customer key reached the upstream"
    );
}

#[tokio::test]
async fn method_path_query_and_body_are_preserved() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let body = vec![b'z'; 12_345];
    let res = app
        .client
        .post(app.url("/western/v1/count?x=1&y=%20two"))
        .header("x-api-key", &customer.api_key)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["received_bytes"], 12_345);
    for method in ["PUT", "PATCH", "DELETE", "OPTIONS"] {
        let res = app
            .client
            .request(method.parse().unwrap(), app.url("/vedic/v1/resource/7"))
            .header("x-api-key", &customer.api_key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    let seen = app.upstream.recorded();
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].path, "/western/v1/count");
    assert_eq!(seen[0].query.as_deref(), Some("x=1&y=%20two"));
    assert_eq!(seen[0].body_len, 12_345);
    let methods: Vec<_> = seen[1..]
        .iter()
        .map(|r| r.method.as_str().to_owned())
        .collect();
    assert_eq!(methods, ["PUT", "PATCH", "DELETE", "OPTIONS"]);
}

#[tokio::test]
async fn the_upstream_status_headers_and_body_come_back_unchanged() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app.call("/vedic/v1/status/418", &customer.api_key).await;
    assert_eq!(res.status(), 418);
    assert_eq!(res.headers()["content-type"], "application/json");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], 418);
}

#[tokio::test]
async fn every_proxied_response_carries_the_gateways_own_request_id() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app
        .client
        .get(app.url("/vedic/v1/x"))
        .header("x-api-key", &customer.api_key)
        .header("x-request-id", "client-chosen-id")
        .send()
        .await
        .unwrap();
    let id = assert_request_id(&res);
    assert_ne!(id, "client-chosen-id");
    assert_eq!(
        app.upstream.recorded()[0].headers["x-request-id"],
        id.as_str()
    );

    let refused = app.call("/vedic/v1/x", "tgk_unknown").await;
    assert_request_id(&refused);
    assert_eq!(refused.status(), 401);
}

#[tokio::test]
async fn a_head_call_gets_the_gets_length_and_no_body_and_the_connection_goes_on() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let get = app.call("/vedic/v1/bytes/1000", &customer.api_key).await;
    assert_eq!(get.status(), 200);
    assert_eq!(get.headers()["content-length"], "1000");
    assert_eq!(get.bytes().await.unwrap().len(), 1000);

    let head = app
        .client
        .head(app.url("/vedic/v1/bytes/1000"))
        .header("x-api-key", &customer.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "1000");
    assert_request_id(&head);
    assert!(head.headers().contains_key("ratelimit"));
    assert!(head.bytes().await.unwrap().is_empty());
    assert_eq!(app.upstream.recorded()[1].method, "HEAD");

    // The same keep-alive connection carries the next call whole.
    let after = app.call("/vedic/v1/x?sign=leo", &customer.api_key).await;
    assert_eq!(after.status(), 200);
    let body: Value = after.json().await.unwrap();
    assert_eq!(body["query"], "sign=leo");
}

#[tokio::test]
async fn proxied_calls_are_counted_under_their_prefix_in_the_http_metrics() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    assert_eq!(
        app.call("/western/v1/status/418", &customer.api_key)
            .await
            .status(),
        418
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, tollgate::http::metrics_router()).await });
    let url = format!("http://{addr}/metrics");
    let counted = |text: &str| {
        let requests = text.lines().any(|line| {
            line.starts_with("tollgate_http_requests_total{")
                && line.contains(r#"route="/western/v1/*""#)
                && line.contains(r#"method="GET""#)
                && line.contains(r#"status="418""#)
        });
        requests
            && text
                .contains(r#"tollgate_http_request_duration_seconds_count{route="/western/v1/*"}"#)
    };
    // Histograms reach the exposition on the recorder's upkeep, every few seconds.
    let seen = eventually(Duration::from_secs(15), || {
        let url = url.clone();
        async move { counted(&get_text(&url).await) }
    })
    .await;
    assert!(seen, "{}", get_text(&url).await);
}

#[tokio::test]
async fn forwarded_for_names_the_client_and_hop_by_hop_headers_stop_at_the_gateway() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    app.client
        .get(app.url("/vedic/v1/x"))
        .header("x-api-key", &customer.api_key)
        .header("x-forwarded-for", "203.0.113.7")
        .header("connection", "x-hop")
        .header("x-hop", "connection-local")
        .header("proxy-authorization", "Basic c2VjcmV0")
        .header("x-custom", "kept")
        .send()
        .await
        .unwrap();
    let seen = &app.upstream.recorded()[0];
    // Not from a trusted proxy: the client's own value is replaced (SPEC §3.1.4).
    assert_eq!(seen.headers["x-forwarded-for"], "127.0.0.1");
    assert!(!seen.headers.contains_key("x-hop"));
    assert!(!seen.headers.contains_key("proxy-authorization"));
    assert_eq!(seen.headers["x-custom"], "kept");
}
