//! Stripe's webhook signature, checked as Stripe documents it (SPEC §11).
//!
//! `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]` (other schemes such as
//! `v0` are ignored). The signed payload is `t + "." + raw body`, the bytes exactly as
//! received; `v1` is its HMAC-SHA256 under the endpoint's signing secret. While a
//! secret is being rolled Stripe sends one `v1` per secret, and any may match. Each
//! candidate is compared in constant time. A timestamp more than [`TOLERANCE_SECS`]
//! from now, either way, is refused, so a captured request cannot be replayed later.
//! Pure: the clock is a parameter.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far the signed timestamp may be from now, in seconds, either way.
pub const TOLERANCE_SECS: i64 = 300;

/// Why a request was refused; each is `400 BAD_SIGNATURE` to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no Stripe-Signature header")]
    Missing,
    #[error("Stripe-Signature is malformed")]
    Malformed,
    #[error("no v1 signature matches")]
    NoMatch,
    #[error("the signed timestamp is outside the tolerance")]
    Stale,
}

impl SignatureError {
    /// A metric and log label.
    pub fn label(self) -> &'static str {
        match self {
            SignatureError::Missing => "missing",
            SignatureError::Malformed => "malformed",
            SignatureError::NoMatch => "mismatch",
            SignatureError::Stale => "stale",
        }
    }
}

/// The parts of a `Stripe-Signature` header this check uses.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    timestamp: i64,
    v1: Vec<String>,
}

fn parse(header: &str) -> Result<Header, SignatureError> {
    let mut timestamp = None;
    let mut v1 = Vec::new();
    for item in header.split(',') {
        let (key, value) = item
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match key {
            "t" if timestamp.is_none() => {
                timestamp = Some(value.parse().map_err(|_| SignatureError::Malformed)?);
            }
            "t" => return Err(SignatureError::Malformed),
            "v1" => v1.push(value.to_owned()),
            _ => {}
        }
    }
    match timestamp {
        Some(timestamp) if !v1.is_empty() => Ok(Header { timestamp, v1 }),
        _ => Err(SignatureError::Malformed),
    }
}

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Checks `header` (the `Stripe-Signature` value, if any) over the raw `body` at
/// `now` (unix seconds); returns the signed timestamp.
pub fn verify(
    header: Option<&str>,
    body: &[u8],
    secret: &[u8],
    now: i64,
) -> Result<i64, SignatureError> {
    let header = parse(header.ok_or(SignatureError::Missing)?)?;
    let expected = mac(secret, header.timestamp, body);
    let matched = header.v1.iter().any(|candidate| {
        hex::decode(candidate).is_ok_and(|sig| expected.clone().verify_slice(&sig).is_ok())
    });
    if !matched {
        return Err(SignatureError::NoMatch);
    }
    if now.abs_diff(header.timestamp) > TOLERANCE_SECS.unsigned_abs() {
        return Err(SignatureError::Stale);
    }
    Ok(header.timestamp)
}

/// The `v1` signature of `body` at `timestamp`, as Stripe computes it (for tests and
/// for operators checking a captured request by hand).
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    hex::encode(mac(secret, timestamp, body).finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"whsec_test_secret";
    const BODY: &[u8] = br#"{"id":"evt_1"}"#;
    const T: i64 = 1_700_000_000;
    // printf '%s' '1700000000.{"id":"evt_1"}' | openssl dgst -sha256 -hmac whsec_test_secret
    const V1: &str = "248a374f50f943a28b0f6ab50faf9a7e7e29b710fa26df9fb1618b9bf8ea9c9a";

    fn check(header: &str, now: i64) -> Result<i64, SignatureError> {
        verify(Some(header), BODY, SECRET, now)
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        assert_eq!(sign(SECRET, T, BODY), V1);
        assert_eq!(check(&format!("t={T},v1={V1}"), T), Ok(T));
    }

    #[test]
    fn any_v1_may_match_and_other_schemes_are_ignored() {
        let other = sign(b"whsec_old", T, BODY);
        let header = format!("t={T},v1={other},v1={V1},v0=6ffbb59b2300aae63f27");
        assert_eq!(check(&header, T), Ok(T));
        assert_eq!(check(&format!("t={T}, v1={V1}"), T), Ok(T));
    }

    #[test]
    fn the_timestamp_may_be_five_minutes_off_either_way_and_no_more() {
        let header = format!("t={T},v1={V1}");
        assert_eq!(check(&header, T + 300), Ok(T));
        assert_eq!(check(&header, T - 300), Ok(T));
        assert_eq!(check(&header, T + 301), Err(SignatureError::Stale));
        assert_eq!(check(&header, T - 301), Err(SignatureError::Stale));
    }

    #[test]
    fn a_wrong_secret_or_a_changed_body_does_not_match() {
        let wrong = sign(b"whsec_other", T, BODY);
        assert_eq!(
            check(&format!("t={T},v1={wrong}"), T),
            Err(SignatureError::NoMatch)
        );
        let header = format!("t={T},v1={V1}");
        assert_eq!(
            verify(Some(&header), br#"{"id":"evt_2"}"#, SECRET, T),
            Err(SignatureError::NoMatch)
        );
        // The timestamp is signed too.
        assert_eq!(
            check(&format!("t={},v1={V1}", T + 1), T),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            check(&format!("t={T},v1=not-hex"), T),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn missing_or_malformed_headers_are_refused() {
        assert_eq!(verify(None, BODY, SECRET, T), Err(SignatureError::Missing));
        for bad in [
            "",
            "garbage",
            &format!("v1={V1}"),
            &format!("t={T}"),
            &format!("t=soon,v1={V1}"),
            &format!("t={T},t={T},v1={V1}"),
            &format!("t={T},v0={V1}"),
        ] {
            assert_eq!(check(bad, T), Err(SignatureError::Malformed), "{bad}");
        }
    }
}
