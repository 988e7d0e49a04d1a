//! Header rewriting between the client, the gateway and the upstream.
//!
//! Hop-by-hop headers (RFC 9110 §7.6.1, plus any the `Connection` header names) are
//! connection-local and never forwarded in either direction. On the way up the
//! customer key is replaced by the shared secret and `X-Request-Id` and
//! `X-Forwarded-For` are set by the gateway.

use std::net::IpAddr;

use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::request_id::X_REQUEST_ID;

const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Removes hop-by-hop headers, including those listed in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(&PROXY_CONNECTION);
}

/// The headers sent upstream for a client request.
pub fn upstream_request_headers(
    mut headers: HeaderMap,
    key_header: &HeaderName,
    shared_secret: Option<&HeaderValue>,
    request_id: &HeaderValue,
    client_ip: Option<IpAddr>,
) -> HeaderMap {
    strip_hop_by_hop(&mut headers);
    headers.remove(header::HOST);
    headers.remove(key_header);
    if let Some(secret) = shared_secret {
        headers.insert(key_header.clone(), secret.clone());
    }
    headers.insert(X_REQUEST_ID.clone(), request_id.clone());
    if let Some(ip) = client_ip {
        let forwarded = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
            Some(existing) if !existing.trim().is_empty() => format!("{existing}, {ip}"),
            _ => ip.to_string(),
        };
        if let Ok(value) = HeaderValue::from_str(&forwarded) {
            headers.insert(X_FORWARDED_FOR.clone(), value);
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_dropped() {
        let mut h = map(&[
            ("connection", "close, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("te", "trailers"),
            ("accept", "application/json"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("accept"));
    }

    #[test]
    fn the_customer_key_is_swapped_for_the_shared_secret() {
        let key = HeaderName::from_static("x-api-key");
        let out = upstream_request_headers(
            map(&[
                ("x-api-key", "tgk_customer"),
                ("x-request-id", "client-chosen"),
                ("host", "gw"),
            ]),
            &key,
            Some(&HeaderValue::from_static("shared")),
            &HeaderValue::from_static("00000000-0000-4000-8000-000000000000"),
            Some("10.1.2.3".parse().unwrap()),
        );
        assert_eq!(out.get_all("x-api-key").iter().count(), 1);
        assert_eq!(out["x-api-key"], "shared");
        assert_eq!(out["x-request-id"], "00000000-0000-4000-8000-000000000000");
        assert_eq!(out["x-forwarded-for"], "10.1.2.3");
        assert!(!out.contains_key("host"));
    }

    #[test]
    fn forwarded_for_is_appended_to() {
        let key = HeaderName::from_static("x-api-key");
        let out = upstream_request_headers(
            map(&[("x-forwarded-for", "203.0.113.9")]),
            &key,
            None,
            &HeaderValue::from_static("id"),
            Some("127.0.0.1".parse().unwrap()),
        );
        assert_eq!(out["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
        assert!(!out.contains_key("x-api-key"));
    }
}
