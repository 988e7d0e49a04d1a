//! What every abuse limit shares: the address a client counts under and the refusal
//! past a limit. The limits themselves are kept fleet-wide ([`super::attempts`],
//! [`super::account_limits`]).

use std::net::IpAddr;
use std::time::Duration;

use crate::error::ApiError;

/// The refusal of an attempt of `kind` that has to wait `wait`, counted in metrics.
pub fn refused(kind: &'static str, wait: Duration) -> ApiError {
    metrics::counter!("tollgate_account_limited_total", "kind" => kind).increment(1);
    ApiError::TooManyRequests {
        retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
    }
}

/// The key an address counts under: IPv4 as is, IPv6 by its /64 (one host usually
/// holds a whole /64).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn ipv6_clients_count_by_their_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(client_key(mapped), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    }

    #[test]
    fn a_wait_is_rounded_up_to_whole_seconds() {
        let wait = |d| match refused("test", d) {
            ApiError::TooManyRequests { retry_after_secs } => retry_after_secs,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait(Duration::from_millis(1500)), 2);
        assert_eq!(wait(Duration::from_secs(360)), 360);
    }
}
