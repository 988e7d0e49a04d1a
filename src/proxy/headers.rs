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
    // Usually there is none: one look at each name beats nine removals.
    let any = headers
        .keys()
        .any(|name| HOP_BY_HOP.contains(name) || *name == PROXY_CONNECTION);
    if !any {
        return;
    }
    if headers.contains_key(header::CONNECTION) {
        for name in connection_named(headers) {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP.iter() {
        headers.remove(name);
    }
    headers.remove(&PROXY_CONNECTION);
}

/// The header names the `Connection` header lists.
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

/// Who sent a request, as far as `X-Forwarded-For` is concerned.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The address the connection came from.
    pub ip: Option<IpAddr>,
    /// Whether that address is in `server.trusted_proxies`.
    pub trusted: bool,
}

/// Room for a client's address and a few proxies' before `X-Forwarded-For` grows.
const CHAIN_CAPACITY: usize = 64;

/// The headers sent upstream for a client request, built in one pass over the
/// client's: what passes keeps its order, the gateway's own headers come last.
pub fn upstream_request_headers(
    headers: HeaderMap,
    key_header: &HeaderName,
    shared_secret: Option<&HeaderValue>,
    request_id: &HeaderValue,
    peer: Peer,
) -> HeaderMap {
    // Rare: a client naming headers in `Connection` (the names are then dropped too).
    let named = if headers.contains_key(header::CONNECTION) {
        connection_named(&headers)
    } else {
        Vec::new()
    };
    let mut out = HeaderMap::with_capacity(headers.len() + 3);
    let mut chain: Option<Vec<u8>> = None;
    let mut last: Option<HeaderName> = None;
    for (name, value) in headers {
        // `None` continues the previous name's values.
        if let Some(name) = name {
            last = Some(name);
        }
        let Some(name) = &last else { continue };
        if *name == X_FORWARDED_FOR {
            if peer.trusted
                && !named.contains(name)
                && let Ok(v) = value.to_str()
                && !v.trim().is_empty()
            {
                let chain = chain.get_or_insert_with(|| Vec::with_capacity(CHAIN_CAPACITY));
                if !chain.is_empty() {
                    chain.extend_from_slice(b", ");
                }
                chain.extend_from_slice(v.trim().as_bytes());
            }
            continue;
        }
        if passes(name, key_header) && !named.contains(name) {
            out.append(name.clone(), value);
        }
    }
    if let Some(secret) = shared_secret {
        out.insert(key_header.clone(), secret.clone());
    }
    out.insert(X_REQUEST_ID.clone(), request_id.clone());
    if let Some(ip) = peer.ip {
        let chain = chain.get_or_insert_with(|| Vec::with_capacity(CHAIN_CAPACITY));
        if !chain.is_empty() {
            chain.extend_from_slice(b", ");
        }
        write_ip(chain, ip);
    }
    if let Some(value) =
        chain.and_then(|v| HeaderValue::from_maybe_shared(bytes::Bytes::from(v)).ok())
    {
        out.insert(X_FORWARDED_FOR.clone(), value);
    }
    out
}

/// Whether a client header other than `X-Forwarded-For` goes upstream as sent.
fn passes(name: &HeaderName, key_header: &HeaderName) -> bool {
    !(HOP_BY_HOP.contains(name)
        || CLIENT_FORWARDING.contains(name)
        || *name == header::HOST
        || *name == PROXY_CONNECTION
        || name == key_header
        || *name == X_REQUEST_ID)
}

/// Appends `ip` as text: an IPv4 address octet by octet (the formatting machinery costs
/// more than the rest of the header), an IPv6 one as `Display` writes it.
fn write_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            let mut digits = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(digits.format(octet).as_bytes());
            }
        }
        IpAddr::V6(v6) => {
            use std::io::Write;
            let _ = write!(out, "{v6}");
        }
    }
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
    fn addresses_are_written_as_display_writes_them() {
        for ip in [
            "10.1.2.3",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "2001:db8::7",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            let mut out = Vec::new();
            write_ip(&mut out, ip);
            assert_eq!(String::from_utf8(out).unwrap(), ip.to_string());
        }
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

    mod properties {
        use super::*;
        use proptest::prelude::*;

        const KEY_HEADER: &str = "x-api-key";
        const SECRET: &str = "shared-secret";

        /// Names a client might send: the ones the gateway rewrites, and any other.
        fn name() -> impl Strategy<Value = String> {
            prop_oneof![
                3 => prop::sample::select(vec![
                    "accept", "content-type", "x-custom", KEY_HEADER, "connection", "keep-alive",
                    "te", "trailer", "transfer-encoding", "upgrade", "proxy-authorization",
                    "proxy-authenticate", "proxy-connection", "host", "forwarded", "x-real-ip",
                    "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-original-url",
                    "x-rewrite-url", "x-request-id",
                ])
                .prop_map(str::to_owned),
                1 => "[a-z][a-z0-9-]{0,12}",
            ]
        }

        /// A client's headers, with the customer key in the key header.
        fn client_headers() -> impl Strategy<Value = (HeaderMap, String)> {
            (
                prop::collection::vec(
                    (name(), "[ -~]{0,24}", prop::collection::vec(name(), 0..3)),
                    0..16,
                ),
                "tgk_[a-z0-9]{12}",
            )
                .prop_map(|(entries, key)| {
                    let mut headers = HeaderMap::new();
                    for (name, value, named) in entries {
                        let value = match name.as_str() {
                            KEY_HEADER => key.clone(),
                            "connection" => named.join(", "),
                            _ => value,
                        };
                        headers.append(
                            HeaderName::from_bytes(name.as_bytes()).unwrap(),
                            HeaderValue::from_str(&value).unwrap(),
                        );
                    }
                    (headers, key)
                })
        }

        fn removed(sent: &HeaderMap) -> Vec<HeaderName> {
            let mut removed: Vec<HeaderName> = HOP_BY_HOP
                .iter()
                .chain(CLIENT_FORWARDING.iter())
                .cloned()
                .chain([header::HOST, PROXY_CONNECTION.clone()])
                .collect();
            removed.extend(
                sent.get_all(header::CONNECTION)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .flat_map(|v| v.split(','))
                    .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok()),
            );
            removed
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1_000))]

            #[test]
            fn rewritten_headers_never_carry_the_key_or_a_removed_header(
                (sent, key) in client_headers(),
                with_secret in any::<bool>(),
                trusted in any::<bool>(),
                ip in prop::option::of(any::<std::net::IpAddr>()),
            ) {
                let key_header = HeaderName::from_static(KEY_HEADER);
                let secret = HeaderValue::from_static(SECRET);
                let request_id = HeaderValue::from_static("00000000-0000-4000-8000-000000000000");
                let out = upstream_request_headers(
                    sent.clone(),
                    &key_header,
                    with_secret.then_some(&secret),
                    &request_id,
                    Peer { ip, trusted },
                );

                prop_assert!(!out.values().any(|v| v.as_bytes() == key.as_bytes()), "{out:?}");
                let keys: Vec<_> = out.get_all(&key_header).iter().collect();
                if with_secret {
                    prop_assert_eq!(keys, vec![&secret]);
                } else {
                    prop_assert!(keys.is_empty());
                }
                let removed = removed(&sent);
                for name in &removed {
                    if name != X_REQUEST_ID && name != X_FORWARDED_FOR && name != key_header {
                        prop_assert!(!out.contains_key(name), "{name} survived: {out:?}");
                    }
                }
                prop_assert_eq!(out.get_all(&X_REQUEST_ID).iter().collect::<Vec<_>>(), vec![&request_id]);

                let forwarded: Vec<_> = out.get_all(&X_FORWARDED_FOR).iter().collect();
                prop_assert!(forwarded.len() <= 1);
                match (ip, trusted) {
                    (Some(ip), false) => {
                        let alone = HeaderValue::from_str(&ip.to_string()).unwrap();
                        prop_assert_eq!(forwarded, vec![&alone]);
                    }
                    (Some(ip), true) => {
                        let chain = forwarded[0].to_str().unwrap();
                        prop_assert!(chain.ends_with(&ip.to_string()), "{chain}");
                    }
                    (None, false) => prop_assert!(forwarded.is_empty()),
                    (None, true) => {}
                }

                // Everything else passes untouched, in order.
                for name in sent.keys() {
                    let rewritten = removed.contains(name)
                        || name == key_header
                        || name == X_REQUEST_ID
                        || name == X_FORWARDED_FOR;
                    if !rewritten {
                        prop_assert_eq!(
                            sent.get_all(name).iter().collect::<Vec<_>>(),
                            out.get_all(name).iter().collect::<Vec<_>>()
                        );
                    }
                }
            }
        }
    }
}
