//! The `Tollgate-Signature` header of every webhook request (SPEC §7).
//!
//! `Tollgate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>`,
//! the scheme Stripe uses, so receivers can reuse their verification code. `t` is the
//! time of the attempt: each retry is signed anew over the same body (the same event
//! `id`), so a receiver can refuse stale timestamps and still accept every retry.
//! Pure: the time is a parameter.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header's name.
pub const HEADER: &str = "tollgate-signature";

/// The hex HMAC-SHA256 of `t + "." + body` under `secret`.
pub fn v1(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The header value for `body` sent at `timestamp` (unix seconds).
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    format!("t={timestamp},v1={}", v1(secret, timestamp, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Vectors made outside the crate:
    //   printf '%s' '1700000000.{"id":"3f1c1e1e-0000-4000-8000-000000000001","type":"usage.threshold"}' \
    //     | openssl dgst -sha256 -hmac whsec_notify_test
    //   printf '%s' '1767225600.{}' | openssl dgst -sha256 -hmac k
    const BODY: &[u8] =
        br#"{"id":"3f1c1e1e-0000-4000-8000-000000000001","type":"usage.threshold"}"#;

    #[test]
    fn the_header_is_the_timestamp_and_the_hmac_of_timestamp_dot_body() {
        assert_eq!(
            signature(b"whsec_notify_test", 1_700_000_000, BODY),
            "t=1700000000,v1=0b4e5ace2b002669507b8adbfd2fac8e13b9eeb04f58ef02be9cd41a10f143b7"
        );
        assert_eq!(
            v1(b"k", 1_767_225_600, b"{}"),
            "fed6131b41a6ecb5f059cee4c80c7df319ff6fa75d64b59110157107b6b6fbed"
        );
    }

    #[test]
    fn another_time_secret_or_body_gives_another_signature() {
        let base = v1(b"whsec_notify_test", 1_700_000_000, BODY);
        assert_ne!(v1(b"whsec_notify_test", 1_700_000_001, BODY), base);
        assert_ne!(v1(b"whsec_notify_tesT", 1_700_000_000, BODY), base);
        assert_ne!(v1(b"whsec_notify_test", 1_700_000_000, b"{}"), base);
    }
}
