//! Which address a request comes from: the TCP peer, or — when the peer is one of
//! `server.trusted_proxies` — the nearest address in `X-Forwarded-For` that is not
//! itself a trusted proxy (the rightmost such entry: entries to its left were written
//! by the client and prove nothing).

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The client address of a request from `peer` carrying `headers`.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let forwarded: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|entry| entry.trim().parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
        .collect();
    forwarded
        .into_iter()
        .rev()
        .find(|ip| !is_trusted(ip))
        .unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let ip = client_ip(
            "203.0.113.7".parse().unwrap(),
            &headers(&["1.2.3.4"]),
            &trusted,
        );
        assert_eq!(ip, "203.0.113.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_entry_is_the_client() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let h = headers(&["6.6.6.6, 198.51.100.2", "10.0.0.5"]);
        let ip = client_ip("10.1.1.1".parse().unwrap(), &h, &trusted);
        assert_eq!(ip, "198.51.100.2".parse::<IpAddr>().unwrap());
        let none = client_ip("10.1.1.1".parse().unwrap(), &headers(&["junk"]), &trusted);
        assert_eq!(none, "10.1.1.1".parse::<IpAddr>().unwrap());
    }
}
