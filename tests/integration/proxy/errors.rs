//! Refusals before the upstream, and an upstream that is down or slow.

use std::time::Duration;

use super::assert_request_id;
use crate::common::*;

#[tokio::test]
async fn missing_unknown_and_malformed_keys_are_refused_before_the_upstream() {
    let app = spawn_app().await;
    let no_key = app.client.get(app.url("/vedic/v1/x")).send().await.unwrap();
    assert_error(no_key, 401, "INVALID_API_KEY").await;
    for key in [
        "tgk_0000000000000000000000000000000000000000".to_owned(),
        "not-even-our-format".to_owned(),
        format!("tgk_{}", "a".repeat(10 * 1024)),
    ] {
        let res = app.call("/western/v1/x", &key).await;
        assert_error(res, 401, "INVALID_API_KEY").await;
    }
    let res = app
        .client
        .get(app.url("/western/v1/x"))
        .header(
            "x-api-key",
            reqwest::header::HeaderValue::from_bytes(b"tgk_\xff\xfe").unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "INVALID_API_KEY").await;
    assert!(app.upstream.recorded().is_empty());
}

#[tokio::test]
async fn an_unreachable_upstream_is_502_and_a_slow_one_504() {
    // Bound but never listening: connections are refused and no other test can take the port.
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let dead_addr = closed.local_addr().unwrap();
    let app = spawn_app_with(|c| c.upstream.base_url = format!("http://{dead_addr}")).await;
    let customer = app.signup().await;
    let res = app.call("/vedic/v1/x", &customer.api_key).await;
    assert_request_id(&res);
    assert_error(res, 502, "UPSTREAM_UNAVAILABLE").await;

    let app = spawn_app_with(|c| c.upstream.timeout_ms = 300).await;
    let customer = app.signup().await;
    let started = std::time::Instant::now();
    let res = app.call("/vedic/v1/slow/3000", &customer.api_key).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_request_id(&res);
    assert_error(res, 504, "UPSTREAM_TIMEOUT").await;
}
