//! Network hardening as clients and the upstream see it: the connection limits of
//! `server.*` on HTTP and HTTPS, the forwarding headers of SPEC §3.1.4, request-body
//! faults answered as the client's, and the configuration keys behind them.
//!
//! The connection tests run with short bounds (hundreds of milliseconds) and print
//! what they measured.

#[allow(dead_code)] // each test binary uses its own share of the helpers
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tollgate::config::{Config, Sources};

const HEADER_READ_MS: u64 = 400;
const IDLE_MS: u64 = 1_000;
/// How late a close may come after its bound on a busy two-core machine.
const SLACK: Duration = Duration::from_millis(1_500);

/// A client connection, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Conn = Box<dyn Io>;

/// A self-signed certificate on disk and a client that trusts it.
struct Tls {
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    connector: tokio_rustls::TlsConnector,
}

fn tls() -> Tls {
    tollgate::startup::install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certified.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Tls {
        _dir: dir,
        cert,
        key,
        connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
    }
}

/// A gateway with short connection bounds, over HTTPS when `tls` is given.
async fn spawn_bounded(tls: Option<&Tls>, adjust: impl FnOnce(&mut Config)) -> TestApp {
    let files = tls.map(|t| (t.cert.clone(), t.key.clone()));
    spawn_app_with(move |c| {
        c.server.header_read_timeout_ms = HEADER_READ_MS;
        c.server.idle_timeout_ms = IDLE_MS;
        if let Some((cert, key)) = files {
            c.server.tls_cert = Some(cert);
            c.server.tls_key = Some(key);
        }
        adjust(c);
    })
    .await
}

async fn open(app: &TestApp, tls: Option<&Tls>) -> Conn {
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    match tls {
        None => Box::new(tcp),
        Some(tls) => {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            Box::new(tls.connector.connect(name, tcp).await.unwrap())
        }
    }
}

fn scheme(tls: Option<&Tls>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}

/// Waits for the peer to close (end of stream or an error); `None` after `limit`.
async fn closed_within(conn: &mut Conn, limit: Duration) -> Option<Instant> {
    let mut buf = [0u8; 1024];
    timeout(limit, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return Instant::now(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// Reads one HTTP/1.1 response with a `content-length`: its status and body.
async fn read_response(conn: &mut Conn) -> (u16, String) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before a response head");
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .expect("a content-length");
    while data.len() < head_end + length {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed inside a response body");
        data.extend_from_slice(&buf[..n]);
    }
    let body = String::from_utf8_lossy(&data[head_end..head_end + length]).to_string();
    (status, body)
}

async fn get_healthz(conn: &mut Conn) -> u16 {
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        .await
        .unwrap();
    conn.flush().await.unwrap();
    read_response(conn).await.0
}

// ---------------------------------------------------------------------------------
// Connection limits (SPEC §2, §9)

/// Sends a request head one byte every 100 ms, never finishing it, until the
/// gateway closes the connection; the time from connect to close.
async fn trickle_head(app: &TestApp, tls: Option<&Tls>) -> Option<Duration> {
    let started = Instant::now();
    let mut conn = open(app, tls).await;
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Slow: ")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    while started.elapsed() < Duration::from_millis(HEADER_READ_MS) + SLACK * 2 {
        if conn.write_all(b"a").await.is_err() || conn.flush().await.is_err() {
            return Some(started.elapsed());
        }
        match timeout(Duration::from_millis(100), conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    None
}

async fn a_trickling_request_head_is_cut(tls: Option<Tls>) {
    let app = spawn_bounded(tls.as_ref(), |_| {}).await;
    let closed = trickle_head(&app, tls.as_ref()).await;
    let closed = closed.expect("a trickling head was never cut");
    println!(
        "header-read ({}): trickling client closed after {} ms (bound {HEADER_READ_MS} ms)",
        scheme(tls.as_ref()),
        closed.as_millis()
    );
    assert!(
        closed >= Duration::from_millis(HEADER_READ_MS - 50),
        "{closed:?}"
    );
    assert!(
        closed <= Duration::from_millis(HEADER_READ_MS) + SLACK,
        "{closed:?}"
    );
}

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

#[tokio::test]
async fn trace_and_connect_are_refused_and_never_reach_the_upstream() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app
        .client
        .request(reqwest::Method::TRACE, app.url("/vedic/v1/x"))
        .header("x-api-key", &customer.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["code"], "METHOD_NOT_ALLOWED");

    let mut conn = open(&app, None).await;
    let request = format!(
        "CONNECT /western/v1/x HTTP/1.1\r\nHost: gw\r\nx-api-key: {}\r\n\r\n",
        customer.api_key
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let (status, body) = read_response(&mut conn).await;
    assert_eq!(status, 405, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "METHOD_NOT_ALLOWED");

    assert!(
        app.upstream.recorded().is_empty(),
        "{:?}",
        app.upstream.recorded()
    );
}

#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_is_replaced_by_the_client_address() {
    let app =
        spawn_app_with(|c| c.server.trusted_proxies = vec!["10.0.0.0/8".parse().unwrap()]).await;
    let customer = app.signup().await;
    let res = app
        .client
        .get(app.url("/vedic/v1/x"))
        .header("x-api-key", &customer.api_key)
        .header("x-forwarded-for", "203.0.113.7")
        .header("x-forwarded-for", "198.51.100.2")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let seen = &app.upstream.recorded()[0];
    let values: Vec<_> = seen.headers.get_all("x-forwarded-for").iter().collect();
    assert_eq!(values, ["127.0.0.1"]);
}

#[tokio::test]
async fn forwarded_for_from_a_trusted_proxy_is_kept_and_appended_to() {
    let app = spawn_app_with(|c| {
        c.server.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    })
    .await;
    let customer = app.signup().await;
    let res = app
        .client
        .get(app.url("/vedic/v1/x"))
        .header("x-api-key", &customer.api_key)
        .header("x-forwarded-for", "203.0.113.7")
        .header("x-forwarded-for", "198.51.100.2")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = app
        .client
        .get(app.url("/vedic/v1/y"))
        .header("x-api-key", &customer.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let seen = app.upstream.recorded();
    let values: Vec<_> = seen[0].headers.get_all("x-forwarded-for").iter().collect();
    assert_eq!(values, ["203.0.113.7, 198.51.100.2, 127.0.0.1"]);
    assert_eq!(seen[1].headers["x-forwarded-for"], "127.0.0.1");
}

const CLIENT_FORWARDING_HEADERS: [(&str, &str); 6] = [
    ("forwarded", "for=203.0.113.7;proto=https;host=evil.example"),
    ("x-real-ip", "203.0.113.7"),
    ("x-forwarded-host", "evil.example"),
    ("x-forwarded-proto", "https"),
    ("x-original-url", "/admin/v1/accounts"),
    ("x-rewrite-url", "/admin/v1/accounts"),
];

#[tokio::test]
async fn client_sent_forwarding_and_rewrite_headers_are_removed() {
    for trusted in [false, true] {
        let app = spawn_app_with(|c| {
            if trusted {
                c.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
            }
        })
        .await;
        let customer = app.signup().await;
        let mut request = app
            .client
            .get(app.url("/vedic/v1/x"))
            .header("x-api-key", &customer.api_key)
            .header("x-kept", "yes");
        for (name, value) in CLIENT_FORWARDING_HEADERS {
            request = request.header(name, value);
        }
        assert_eq!(request.send().await.unwrap().status(), 200);
        let seen = &app.upstream.recorded()[0];
        for (name, _) in CLIENT_FORWARDING_HEADERS {
            assert!(
                !seen.headers.contains_key(name),
                "{name} reached the upstream (trusted peer: {trusted})"
            );
        }
        assert_eq!(seen.headers["x-kept"], "yes");
        assert_eq!(seen.headers["x-forwarded-for"], "127.0.0.1");
    }
}

// ---------------------------------------------------------------------------------
// Request-body faults are the client's

/// The sum of a counter's series in the process's metrics exposition.
fn counter_total(name: &str) -> f64 {
    tollgate::telemetry::prometheus()
        .render()
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sends `request` as bytes and reads the answer until the gateway closes.
async fn raw_exchange(app: &TestApp, request: &[u8]) -> (u16, Value) {
    let mut conn = open(app, None).await;
    conn.write_all(request).await.unwrap();
    let mut response = Vec::new();
    let _ = timeout(Duration::from_secs(10), conn.read_to_end(&mut response)).await;
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no response: {text:?}"))
        .parse()
        .unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn chunked_head(key: &str) -> String {
    format!(
        "POST /vedic/v1/count HTTP/1.1\r\nHost: gw\r\nx-api-key: {key}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
}

#[tokio::test]
async fn malformed_chunked_bodies_are_answered_400_as_the_clients_fault() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let upstream_errors = counter_total("tollgate_upstream_errors_total");
    let client_errors = counter_total("tollgate_client_errors_total");
    let long_extension = format!("5;ext={}\r\nhello\r\n", "x".repeat(17 * 1024));
    let bad_chunks = [
        ("non-hex size", "zz\r\nhello\r\n0\r\n\r\n".to_owned()),
        ("negative size", "-1\r\nhello\r\n0\r\n\r\n".to_owned()),
        (
            "overflowing size",
            "fffffffffffffffffffff\r\nhello\r\n0\r\n\r\n".to_owned(),
        ),
        ("oversized extension", long_extension),
    ];
    for (what, chunk) in &bad_chunks {
        let request = format!("{}5\r\nfirst\r\n{chunk}", chunked_head(&customer.api_key));
        let (status, body) = raw_exchange(&app, request.as_bytes()).await;
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["code"], "BAD_REQUEST_BODY", "{what}: {body}");
    }
    assert_eq!(
        counter_total("tollgate_upstream_errors_total"),
        upstream_errors,
        "a client's bad body was counted as an upstream error"
    );
    assert_eq!(
        counter_total("tollgate_client_errors_total") - client_errors,
        bad_chunks.len() as f64
    );
    // The upstream never answered those calls: they consume nothing.
    assert_eq!(
        app.call("/vedic/v1/x", &customer.api_key).await.status(),
        200
    );
    app.wait_for_ledger(customer.account_id, 1).await;
}

#[tokio::test]
async fn a_stalled_request_body_is_408_well_before_the_upstream_timeout() {
    let app = spawn_bounded(None, |c| c.upstream.timeout_ms = 5_000).await;
    let customer = app.signup().await;
    let upstream_errors = counter_total("tollgate_upstream_errors_total");
    let request = format!(
        "POST /vedic/v1/count HTTP/1.1\r\nHost: gw\r\nx-api-key: {}\r\n\
         Content-Length: 100\r\nConnection: close\r\n\r\nonly ten b",
        customer.api_key
    );
    let started = Instant::now();
    let (status, body) = raw_exchange(&app, request.as_bytes()).await;
    let after = started.elapsed();
    println!(
        "body stall: answered {status} after {} ms (bound {HEADER_READ_MS} ms between pieces)",
        after.as_millis()
    );
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["code"], "REQUEST_TIMEOUT");
    assert!(
        after < Duration::from_millis(HEADER_READ_MS) + SLACK,
        "{after:?}"
    );
    assert_eq!(
        counter_total("tollgate_upstream_errors_total"),
        upstream_errors,
        "a client's stalled body was counted as an upstream error"
    );
    assert_eq!(
        app.call("/vedic/v1/x", &customer.api_key).await.status(),
        200
    );
    app.wait_for_ledger(customer.account_id, 1).await;
}

#[tokio::test]
async fn a_stalled_json_body_on_the_account_api_is_408_too() {
    let app = spawn_bounded(None, |_| {}).await;
    let request = "POST /account/v1/signup HTTP/1.1\r\nHost: gw\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n\
         {\"email\": ";
    let started = Instant::now();
    let (status, body) = raw_exchange(&app, request.as_bytes()).await;
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["code"], "REQUEST_TIMEOUT");
    assert!(started.elapsed() < Duration::from_millis(HEADER_READ_MS) + SLACK);
}

// ---------------------------------------------------------------------------------
// Configuration (SPEC §2)

fn load(dir: &Path, env: &[(&str, &str)]) -> Result<Config, String> {
    Config::load(&Sources {
        dir: dir.to_owned(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

#[test]
fn the_connection_keys_have_the_spec_defaults_in_code_and_in_default_toml() {
    let empty = tempfile::tempdir().unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    for dir in [empty.path(), shipped.as_path()] {
        let config = load(dir, &[]).unwrap();
        assert_eq!(config.server.header_read_timeout_ms, 10_000);
        assert_eq!(config.server.idle_timeout_ms, 60_000);
        assert_eq!(config.server.max_connections, 10_000);
        assert!(config.server.trusted_proxies.is_empty());
    }
    let listed = std::fs::read_to_string(shipped.join("default.toml")).unwrap();
    for key in [
        "header_read_timeout_ms",
        "idle_timeout_ms",
        "max_connections = 10000",
        "trusted_proxies",
    ] {
        assert!(
            listed.contains(key),
            "config/default.toml does not list {key}"
        );
    }
}

#[test]
fn zero_timeouts_and_connection_caps_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (var, key) in [
        ("TOLLGATE__UPSTREAM__TIMEOUT_MS", "upstream.timeout_ms"),
        (
            "TOLLGATE__SERVER__HEADER_READ_TIMEOUT_MS",
            "server.header_read_timeout_ms",
        ),
        (
            "TOLLGATE__SERVER__IDLE_TIMEOUT_MS",
            "server.idle_timeout_ms",
        ),
        (
            "TOLLGATE__SERVER__MAX_CONNECTIONS",
            "server.max_connections",
        ),
    ] {
        let error = load(dir.path(), &[(var, "0")]).expect_err(key);
        assert!(error.contains(key), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
        assert!(load(dir.path(), &[(var, "1")]).is_ok(), "{key} = 1");
    }
}

#[test]
fn trusted_proxies_take_cidr_blocks_and_refuse_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("default.toml"),
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.1\"]\n",
    )
    .unwrap();
    let config = load(dir.path(), &[]).unwrap();
    let listed: Vec<String> = config
        .server
        .trusted_proxies
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(listed, ["10.0.0.0/8", "2001:db8::/32", "192.0.2.1/32"]);

    let from_env = load(
        dir.path(),
        &[("TOLLGATE__SERVER__TRUSTED_PROXIES", "172.16.0.0/12, ::1")],
    )
    .unwrap();
    let listed: Vec<String> = from_env
        .server
        .trusted_proxies
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(listed, ["172.16.0.0/12", "::1/128"]);

    for bad in ["10.0.0.0/33", "not-an-address", "10.0.0.0/8, 300.1.1.1"] {
        let error = load(dir.path(), &[("TOLLGATE__SERVER__TRUSTED_PROXIES", bad)]).expect_err(bad);
        assert!(error.contains("trusted_proxies"), "{bad}: {error}");
        assert_eq!(error.lines().count(), 1, "{error}");
    }
}
