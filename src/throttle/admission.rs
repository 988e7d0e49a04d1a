//! The admission hash of SPEC §5.
//!
//! `bucket = u32_be(SHA-256("v1:" + account_id + ":" + request_uuid)[0..4]) mod 100`;
//! a marked account's call is admitted when its bucket is below
//! `throttle.admission_percent`. The request UUID is the gateway's own, never a
//! client-sent one, so a client cannot pick its bucket.

use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The bucket (0–99) of one call.
pub fn bucket(account_id: i64, request_id: Uuid) -> u8 {
    let input = format!("v1:{account_id}:{}", request_id.hyphenated());
    let digest = Sha256::digest(input.as_bytes());
    let head = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    (head % 100) as u8
}

/// Whether a call of a marked account is let through.
pub fn admits(bucket: u8, admission_percent: u8) -> bool {
    bucket < admission_percent
}

/// The outcome of admission for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Throttling is off.
    Disabled,
    /// No marker for the account this month.
    Unmarked,
    /// Marked, but the call's bucket is below the admission percentage.
    AdmittedByBucket,
    /// The view is too old to trust; admitted (fail open).
    FailOpen,
    /// Marked and outside the admitted buckets.
    Throttled,
}

impl Admission {
    /// How many outcomes there are.
    pub(super) const COUNT: usize = 5;

    pub fn admitted(self) -> bool {
        self != Admission::Throttled
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Admission::Disabled => "disabled",
            Admission::Unmarked => "unmarked",
            Admission::AdmittedByBucket => "admitted_bucket",
            Admission::FailOpen => "fail_open",
            Admission::Throttled => "throttled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specs_example_lands_in_bucket_75() {
        let id = Uuid::parse_str("00000000-0000-4000-8000-000000000000").unwrap();
        assert_eq!(bucket(42, id), 75);
    }

    #[test]
    fn buckets_match_independently_computed_vectors() {
        let vectors = include_str!("admission_vectors.txt");
        let mut checked = 0;
        for line in vectors
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let account: i64 = parts[0].parse().unwrap();
            let id = Uuid::parse_str(parts[1]).unwrap();
            let expected: u8 = parts[2].parse().unwrap();
            assert_eq!(bucket(account, id), expected, "{line}");
            checked += 1;
        }
        assert_eq!(checked, 20);
    }

    #[test]
    fn uppercase_input_uuids_hash_as_lowercase() {
        let lower = Uuid::parse_str("123e4567-e89b-42d3-a456-426614174000").unwrap();
        let upper = Uuid::parse_str("123E4567-E89B-42D3-A456-426614174000").unwrap();
        assert_eq!(bucket(7, lower), bucket(7, upper));
    }

    #[test]
    fn admission_is_strictly_below_the_percentage() {
        assert!(admits(19, 20));
        assert!(!admits(20, 20));
        assert!(!admits(0, 0));
        assert!(admits(99, 100));
    }
}
