//! The metering proxy as a customer and the upstream see it.

mod common;

use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn assert_request_id(res: &reqwest::Response) -> String {
    let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let parsed = uuid::Uuid::parse_str(&id).unwrap();
    assert_eq!(parsed.get_version_num(), 4);
    assert_eq!(id, parsed.hyphenated().to_string(), "lowercase hyphenated");
    id
}

async fn code_of(res: reqwest::Response) -> (StatusCode, String) {
    let status = res.status();
    let body: Value = res.json().await.unwrap();
    (status, body["code"].as_str().unwrap().to_owned())
}

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

#[tokio::test]
async fn missing_unknown_and_malformed_keys_are_refused_before_the_upstream() {
    let app = spawn_app().await;
    let no_key = app.client.get(app.url("/vedic/v1/x")).send().await.unwrap();
    assert_eq!(
        code_of(no_key).await,
        (StatusCode::UNAUTHORIZED, "INVALID_API_KEY".into())
    );
    for key in [
        "tgk_0000000000000000000000000000000000000000".to_owned(),
        "not-even-our-format".to_owned(),
        format!("tgk_{}", "a".repeat(10 * 1024)),
    ] {
        let res = app.call("/western/v1/x", &key).await;
        assert_eq!(
            code_of(res).await,
            (StatusCode::UNAUTHORIZED, "INVALID_API_KEY".into())
        );
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
    assert_eq!(
        code_of(res).await,
        (StatusCode::UNAUTHORIZED, "INVALID_API_KEY".into())
    );
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
    assert_eq!(
        code_of(res).await,
        (StatusCode::BAD_GATEWAY, "UPSTREAM_UNAVAILABLE".into())
    );

    let app = spawn_app_with(|c| c.upstream.timeout_ms = 300).await;
    let customer = app.signup().await;
    let started = std::time::Instant::now();
    let res = app.call("/vedic/v1/slow/3000", &customer.api_key).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_request_id(&res);
    assert_eq!(
        code_of(res).await,
        (StatusCode::GATEWAY_TIMEOUT, "UPSTREAM_TIMEOUT".into())
    );
}

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
        assert_eq!(
            code_of(res).await,
            (StatusCode::NOT_FOUND, "NOT_FOUND".into()),
            "{path}"
        );
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

#[tokio::test]
async fn tls_serves_the_api_and_the_proxy_when_a_certificate_is_configured() {
    let dir = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let app = spawn_app_with(|c| {
        c.server.tls_cert = Some(cert_path.clone());
        c.server.tls_key = Some(key_path.clone());
    })
    .await;
    assert!(app.base.starts_with("https://"));
    let res = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let customer = app.signup().await;
    assert_eq!(
        app.call("/western/v1/x", &customer.api_key).await.status(),
        200
    );
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(
        plain
            .get(format!("http://{}/healthz", app.addr))
            .send()
            .await
            .map(|r| r.status() != 200)
            .unwrap_or(true)
    );
}

#[tokio::test]
async fn shutdown_lets_in_flight_calls_finish_and_stops_accepting() {
    let mut app = spawn_app().await;
    let customer = app.signup().await;
    let url = app.url("/vedic/v1/slow/700");
    let client = app.client.clone();
    let key = customer.api_key.clone();
    let in_flight =
        tokio::spawn(async move { client.get(url).header("x-api-key", key).send().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stopped = app.begin_shutdown().unwrap();
    let res = in_flight.await.unwrap().unwrap();
    assert_eq!(res.status(), 200);
    stopped.await.unwrap().unwrap();
    let fresh = common::client();
    assert!(fresh.get(app.url("/healthz")).send().await.is_err());
}

#[tokio::test]
async fn an_https_upstream_must_present_a_trusted_certificate() {
    tollgate::startup::install_crypto();
    // An HTTPS server whose self-signed certificate no public root vouches for.
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
        cert.cert.pem().into_bytes(),
        cert.signing_key.serialize_pem().into_bytes(),
    )
    .await
    .unwrap();
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reached.clone();
    let untrusted = axum::Router::new().fallback(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { "secret-bearing request received" }
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = axum_server::from_tcp_rustls(listener, tls).serve(untrusted.into_make_service());
    let server = tokio::spawn(server);

    let app = spawn_app_with(|c| c.upstream.base_url = format!("https://localhost:{port}")).await;
    let customer = app.signup().await;
    let res = app.call("/vedic/v1/daily", &customer.api_key).await;
    assert_eq!(
        code_of(res).await,
        (StatusCode::BAD_GATEWAY, "UPSTREAM_UNAVAILABLE".into())
    );
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
    server.abort();
}

#[tokio::test]
async fn an_upstream_that_never_completes_the_tls_handshake_is_unreachable_not_slow() {
    // Accepts TCP connections and holds them without a word: the handshake never ends.
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = stalled.local_addr().unwrap().port();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = stalled.accept().await {
            held.push(socket);
        }
    });
    // Longer than the 10 s bound of a connection attempt, so 504 would mean the
    // handshake was never bounded.
    let app = spawn_app_with(|c| {
        c.upstream.base_url = format!("https://localhost:{port}");
        c.upstream.timeout_ms = 20_000;
    })
    .await;
    let customer = app.signup().await;
    let started = std::time::Instant::now();
    let res = app.call("/vedic/v1/daily", &customer.api_key).await;
    assert_eq!(
        code_of(res).await,
        (StatusCode::BAD_GATEWAY, "UPSTREAM_UNAVAILABLE".into())
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    holder.abort();
}
