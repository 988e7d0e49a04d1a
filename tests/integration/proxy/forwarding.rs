//! What reaches the upstream and what comes back: the key swapped for the shared
//! secret, method, path, query and body intact, the request id, forwarding headers.

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
