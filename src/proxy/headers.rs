//! Header rewriting between the client, the gateway and the upstream.
//!
//! Hop-by-hop headers (RFC 9110 §7.6.1, plus any the `Connection` header names) are
//! connection-local and never forwarded in either direction. On the way up the
//! customer key is replaced by the shared secret and `X-Request-Id` and
//! `X-Forwarded-For` are set by the gateway (SPEC §3.1.4): the client's own
//! `X-Forwarded-For` survives, appended to, only when the peer is a trusted proxy, and
//! the headers a client could use to pose as a proxy or to steer URL rewriting behind
//! the gateway never pass.

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

/// Client-sent forwarding and rewrite headers, removed whoever the peer is.
const CLIENT_FORWARDING: [HeaderName; 6] = [
    header::FORWARDED,
    HeaderName::from_static("x-real-ip"),
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-forwarded-proto"),
    HeaderName::from_static("x-original-url"),
    HeaderName::from_static("x-rewrite-url"),
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

/// Who sent a request, as far as `X-Forwarded-For` is concerned.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The address the connection came from.
    pub ip: Option<IpAddr>,
    /// Whether that address is in `server.trusted_proxies`.
    pub trusted: bool,
}

/// The headers sent upstream for a client request.
pub fn upstream_request_headers(
    mut headers: HeaderMap,
    key_header: &HeaderName,
    shared_secret: Option<&HeaderValue>,
    request_id: &HeaderValue,
    peer: Peer,
) -> HeaderMap {
    strip_hop_by_hop(&mut headers);
    headers.remove(header::HOST);
    for name in &CLIENT_FORWARDING {
        headers.remove(name);
    }
    headers.remove(key_header);
    if let Some(secret) = shared_secret {
        headers.insert(key_header.clone(), secret.clone());
    }
    headers.insert(X_REQUEST_ID.clone(), request_id.clone());
    let forwarded_for = forwarded_for(&headers, peer);
    headers.remove(&X_FORWARDED_FOR);
    if let Some(value) = forwarded_for.and_then(|v| HeaderValue::from_str(&v).ok()) {
        headers.insert(X_FORWARDED_FOR.clone(), value);
    }
    headers
}

/// The `X-Forwarded-For` chain to send: a trusted proxy's chain (all its header
/// lines, in order) followed by the peer, or the peer alone.
fn forwarded_for(headers: &HeaderMap, peer: Peer) -> Option<String> {
    let mut chain: Vec<String> = Vec::new();
    if peer.trusted {
        chain.extend(
            headers
                .get_all(&X_FORWARDED_FOR)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
        );
    }
    chain.extend(peer.ip.map(|ip| ip.to_string()));
    (!chain.is_empty()).then(|| chain.join(", "))
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
            Peer {
                ip: Some("10.1.2.3".parse().unwrap()),
                trusted: false,
            },
        );
        assert_eq!(out.get_all("x-api-key").iter().count(), 1);
        assert_eq!(out["x-api-key"], "shared");
        assert_eq!(out["x-request-id"], "00000000-0000-4000-8000-000000000000");
        assert_eq!(out["x-forwarded-for"], "10.1.2.3");
        assert!(!out.contains_key("host"));
    }

    #[test]
    fn forwarded_for_is_appended_to_only_for_a_trusted_peer() {
        let key = HeaderName::from_static("x-api-key");
        let sent = map(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-for", "198.51.100.2"),
        ]);
        let forward = |trusted| {
            upstream_request_headers(
                sent.clone(),
                &key,
                None,
                &HeaderValue::from_static("id"),
                Peer {
                    ip: Some("127.0.0.1".parse().unwrap()),
                    trusted,
                },
            )
        };
        let from_proxy = forward(true);
        assert_eq!(
            from_proxy["x-forwarded-for"],
            "203.0.113.9, 198.51.100.2, 127.0.0.1"
        );
        assert!(!from_proxy.contains_key("x-api-key"));
        let from_anyone = forward(false);
        assert_eq!(
            from_anyone.get_all("x-forwarded-for").iter().count(),
            1,
            "{from_anyone:?}"
        );
        assert_eq!(from_anyone["x-forwarded-for"], "127.0.0.1");
    }
}
