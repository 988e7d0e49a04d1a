//! TLS on both sides (serving it, and demanding a trusted, timely upstream handshake),
//! and a graceful shutdown.

use std::time::Duration;

use crate::common::*;

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
    let fresh = crate::common::client();
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
    assert_error(res, 502, "UPSTREAM_UNAVAILABLE").await;
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
    assert_error(res, 502, "UPSTREAM_UNAVAILABLE").await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    holder.abort();
}
