//! Header-read and idle timeouts and the connection cap, on HTTP and HTTPS.

use super::*;
use crate::common::*;

#[tokio::test]
async fn a_client_trickling_its_request_head_is_closed_after_the_header_read_timeout_http() {
    a_trickling_request_head_is_cut(None).await;
}

#[tokio::test]
async fn a_client_trickling_its_request_head_is_closed_after_the_header_read_timeout_https() {
    a_trickling_request_head_is_cut(Some(tls())).await;
}

async fn a_silent_connection_is_cut(tls: Option<Tls>) {
    let app = spawn_bounded(tls.as_ref(), |_| {}).await;
    // Not even a TLS handshake: the bound covers it too.
    let started = Instant::now();
    let mut conn: Conn = Box::new(TcpStream::connect(app.addr).await.unwrap());
    let closed = closed_within(&mut conn, Duration::from_millis(HEADER_READ_MS) + SLACK * 2)
        .await
        .expect("a silent connection was never closed");
    let after = closed - started;
    println!(
        "header-read ({}): silent connection closed after {} ms (bound {HEADER_READ_MS} ms)",
        scheme(tls.as_ref()),
        after.as_millis()
    );
    assert!(
        after >= Duration::from_millis(HEADER_READ_MS - 50),
        "{after:?}"
    );
    assert!(
        after <= Duration::from_millis(HEADER_READ_MS) + SLACK,
        "{after:?}"
    );
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_header_read_timeout_http() {
    a_silent_connection_is_cut(None).await;
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_header_read_timeout_https() {
    a_silent_connection_is_cut(Some(tls())).await;
}

async fn an_idle_keep_alive_connection_is_cut(tls: Option<Tls>) {
    let app = spawn_bounded(tls.as_ref(), |_| {}).await;
    let mut conn = open(&app, tls.as_ref()).await;
    assert_eq!(get_healthz(&mut conn).await, 200);
    // A second request on the same connection: it is kept alive between requests.
    assert_eq!(get_healthz(&mut conn).await, 200);
    let idle_since = Instant::now();
    let closed = closed_within(&mut conn, Duration::from_millis(IDLE_MS) + SLACK * 2)
        .await
        .expect("an idle keep-alive connection was never closed");
    let after = closed - idle_since;
    println!(
        "idle ({}): keep-alive connection closed after {} ms idle (bound {IDLE_MS} ms; \
         header-read bound {HEADER_READ_MS} ms)",
        scheme(tls.as_ref()),
        after.as_millis()
    );
    // Idle is measured by its own bound, not the (shorter) header-read one.
    assert!(after >= Duration::from_millis(IDLE_MS - 100), "{after:?}");
    assert!(after <= Duration::from_millis(IDLE_MS) + SLACK, "{after:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_http() {
    an_idle_keep_alive_connection_is_cut(None).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_https() {
    an_idle_keep_alive_connection_is_cut(Some(tls())).await;
}

#[tokio::test]
async fn slow_upstreams_and_slow_but_steady_uploads_outlast_the_connection_bounds() {
    let app = spawn_bounded(None, |_| {}).await;
    let customer = app.signup().await;
    // The upstream takes longer than both bounds to answer.
    let started = Instant::now();
    let res = app
        .call(
            &format!("/vedic/v1/slow/{}", IDLE_MS + 500),
            &customer.api_key,
        )
        .await;
    assert_eq!(res.status(), 200);
    assert!(started.elapsed() >= Duration::from_millis(IDLE_MS + 500));

    // A body whose pieces come closer together than the bound, for longer than it.
    let pieces = futures_util::stream::unfold(0, |i| async move {
        if i == 6 {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(HEADER_READ_MS / 2)).await;
        Some((
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"0123456789")),
            i + 1,
        ))
    });
    let started = Instant::now();
    let res = app
        .client
        .post(app.url("/vedic/v1/count"))
        .header("x-api-key", &customer.api_key)
        .body(reqwest::Body::wrap_stream(pieces))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["received_bytes"], 60);
    assert!(started.elapsed() > Duration::from_millis(HEADER_READ_MS * 2));
}

#[tokio::test]
async fn past_max_connections_new_ones_wait_unaccepted_and_held_ones_keep_working() {
    let app = spawn_app_with(|c| {
        c.server.max_connections = 2;
        c.server.header_read_timeout_ms = 10_000;
        c.server.idle_timeout_ms = 30_000;
    })
    .await;
    let mut first = open(&app, None).await;
    let mut second = open(&app, None).await;
    assert_eq!(get_healthz(&mut first).await, 200);
    assert_eq!(get_healthz(&mut second).await, 200);

    // The kernel completes the handshake (backlog), but the gateway does not take it.
    let mut third = open(&app, None).await;
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let early = timeout(Duration::from_millis(800), third.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "a third connection was served (or refused) past max_connections: {early:?}"
    );

    // The two held connections keep working meanwhile.
    for _ in 0..3 {
        assert_eq!(get_healthz(&mut first).await, 200);
        assert_eq!(get_healthz(&mut second).await, 200);
    }

    drop(first);
    let released = Instant::now();
    let (status, _) = timeout(Duration::from_secs(5), read_response(&mut third))
        .await
        .expect("the waiting connection was served once a slot freed");
    println!(
        "max-connections: third connection waited, then was served {} ms after one of two closed",
        released.elapsed().as_millis()
    );
    assert_eq!(status, 200);
    assert_eq!(get_healthz(&mut second).await, 200);
}

// ---------------------------------------------------------------------------------
// Forwarding (SPEC §3.1.4)
