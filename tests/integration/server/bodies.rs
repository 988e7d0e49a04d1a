//! A client's broken or stalled body is the client's error, never the upstream's.

use super::*;
use crate::common::*;

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

/// A body refused before all of it has arrived: the client, still sending, reads the
/// whole `413` rather than a reset, and its upload is taken to the end.
async fn an_oversized_body_is_refused_with_a_readable_413(tls: Option<Tls>) {
    let app = spawn_bounded(tls.as_ref(), |_| {}).await;
    let body = vec![b'a'; 512 * 1024];
    // Each exchange is a race between the refusal and the upload; several make a
    // reset that destroys the answer all but certain to show.
    for attempt in 0..8 {
        let conn = open(&app, tls.as_ref()).await;
        let (mut read, mut write) = tokio::io::split(conn);
        let head = format!(
            "POST /account/v1/signup HTTP/1.1\r\nHost: gw\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n",
            body.len()
        );
        let upload = body.clone();
        let sender = tokio::spawn(async move {
            write.write_all(head.as_bytes()).await?;
            // As a client on a real network sends: a piece at a time, so that the
            // refusal is written while most of the body is still to come.
            for piece in upload.chunks(32 * 1024) {
                write.write_all(piece).await?;
                write.flush().await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok::<_, std::io::Error>(write)
        });
        let mut response = Vec::new();
        timeout(Duration::from_secs(10), read.read_to_end(&mut response))
            .await
            .expect("the refusal came within 10 s")
            .unwrap_or_else(|e| {
                panic!(
                    "{} attempt {attempt}: reading the refusal failed: {e}",
                    scheme(tls.as_ref())
                )
            });
        let text = String::from_utf8_lossy(&response);
        let (head, json) = text.split_once("\r\n\r\n").expect("a whole response");
        assert!(head.starts_with("HTTP/1.1 413 "), "{head}");
        // The rest of the body is never read, so the connection takes no next request.
        assert!(
            head.lines()
                .any(|l| l.eq_ignore_ascii_case("connection: close")),
            "{head}"
        );
        let json: Value = serde_json::from_str(json).unwrap();
        assert_eq!(json["code"], "PAYLOAD_TOO_LARGE", "{json}");
        let sent = sender.await.unwrap();
        assert!(
            sent.is_ok(),
            "attempt {attempt}: the upload was cut: {:?}",
            sent.err()
        );
    }
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_a_readable_413_http() {
    an_oversized_body_is_refused_with_a_readable_413(None).await;
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_a_readable_413_https() {
    an_oversized_body_is_refused_with_a_readable_413(Some(tls())).await;
}
