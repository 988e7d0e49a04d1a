//! What reaches the upstream: TRACE and CONNECT never, forwarding headers rewritten.

use super::*;
use crate::common::*;

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
