//! The public listener against hostile and faulty clients (SPEC §2 `server.*`, §3.1.4,
//! §9): connection bounds on HTTP and HTTPS, forwarding headers, broken and stalled
//! bodies, and the keys that set the bounds.

mod bodies;
mod config_keys;
mod connections;
mod forwarding;

pub use std::path::{Path, PathBuf};
pub use std::sync::Arc;
pub use std::time::{Duration, Instant};

use crate::common::*;
pub use serde_json::Value;
pub use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
pub use tokio::net::TcpStream;
pub use tokio::time::timeout;
pub use tollgate::config::{Config, Sources};

pub(super) const HEADER_READ_MS: u64 = 400;
pub(super) const IDLE_MS: u64 = 1_000;
/// How late a close may come after its bound on a busy two-core machine.
pub(super) const SLACK: Duration = Duration::from_millis(1_500);

/// A client connection, plain or TLS.
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub(super) type Conn = Box<dyn Io>;

/// A self-signed certificate on disk and a client that trusts it.
pub(super) struct Tls {
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    connector: tokio_rustls::TlsConnector,
}

pub(super) fn tls() -> Tls {
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
pub(super) async fn spawn_bounded(tls: Option<&Tls>, adjust: impl FnOnce(&mut Config)) -> TestApp {
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

pub(super) async fn open(app: &TestApp, tls: Option<&Tls>) -> Conn {
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    match tls {
        None => Box::new(tcp),
        Some(tls) => {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            Box::new(tls.connector.connect(name, tcp).await.unwrap())
        }
    }
}

pub(super) fn scheme(tls: Option<&Tls>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}

/// Waits for the peer to close (end of stream or an error); `None` after `limit`.
pub(super) async fn closed_within(conn: &mut Conn, limit: Duration) -> Option<Instant> {
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
pub(super) async fn read_response(conn: &mut Conn) -> (u16, String) {
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

pub(super) async fn get_healthz(conn: &mut Conn) -> u16 {
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
pub(super) async fn trickle_head(app: &TestApp, tls: Option<&Tls>) -> Option<Duration> {
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

pub(super) async fn a_trickling_request_head_is_cut(tls: Option<Tls>) {
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
