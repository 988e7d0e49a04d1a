//! Only the proxied prefixes are forwarded, and no path can climb out of its prefix.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

#[tokio::test]
async fn paths_outside_the_prefixes_are_not_found() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    for path in [
        "/",
        "/vedic",
        "/vedic/v2/x",
        "/westernx/v1/x",
        "/admin",
        "/account/v1/nothing",
    ] {
        let res = app.call(path, &customer.api_key).await;
        assert_error(res, 404, "NOT_FOUND").await;
    }
    assert!(app.upstream.recorded().is_empty());
}

/// Sends a request line as given, bypassing client-side path normalisation.
async fn raw_get(addr: std::net::SocketAddr, path: &str, key: &str) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: gw\r\nx-api-key: {key}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn paths_that_try_to_leave_their_prefix_never_reach_the_upstream() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    for path in [
        "/vedic/v1/../admin",
        "/vedic/v1/../../western/v1/x",
        "/vedic/v1/%2e%2e/admin",
        "/vedic/v1/%2E%2e/%2e%2E/secret",
        "/vedic/v1/..%2fadmin",
        "/vedic/v1/..%2Fadmin",
        "/vedic/v1/%252e%252e/admin",
        "/vedic/v1/..%5cadmin",
        "/vedic/v1/..;/admin",
        "/western/v1/./x",
        "/western/v1/a/%2e/b",
    ] {
        let status = raw_get(app.addr, path, &customer.api_key).await;
        assert!((400..500).contains(&status), "{path} answered {status}");
    }
    assert!(
        app.upstream.recorded().is_empty(),
        "{:?}",
        app.upstream.recorded()
    );
    assert_eq!(
        raw_get(app.addr, "/vedic/v1/fine", &customer.api_key).await,
        200
    );
}
