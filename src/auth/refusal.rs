//! Refused unauthenticated requests (SPEC §9): unknown or revoked keys, escaping paths,
//! bad admin tokens.
//!
//! Every refusal is counted in `tollgate_auth_refused_total{reason}`; at most one line
//! per reason is logged every [`LOG_EVERY`], saying how many were held back since the
//! last. A flood of such requests thus costs a counter increment each, not a log line.

use std::sync::LazyLock;
use std::time::Duration;

use crate::telemetry::RateLimitedLog;

/// At most one log line per reason this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Why an unauthenticated request was refused; the metric's `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    MissingKey,
    MalformedKey,
    UnknownKey,
    RevokedKey,
    EscapingPath,
    AdminToken,
    ExpiredKey,
    OutOfScope,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::MissingKey => "missing_key",
            Refusal::MalformedKey => "malformed_key",
            Refusal::UnknownKey => "unknown_key",
            Refusal::RevokedKey => "revoked_key",
            Refusal::EscapingPath => "escaping_path",
            Refusal::AdminToken => "admin_token",
            Refusal::ExpiredKey => "expired_key",
            Refusal::OutOfScope => "out_of_scope",
        }
    }
}

static LOGS: LazyLock<[RateLimitedLog; 8]> =
    LazyLock::new(|| std::array::from_fn(|_| RateLimitedLog::new(LOG_EVERY)));

/// Counts a refusal. `Some(suppressed)` when a line may be logged now, with the number
/// of refusals of this reason held back since the last line.
#[must_use = "log a line when this says so"]
pub fn refused(why: Refusal) -> Option<u64> {
    metrics::counter!("tollgate_auth_refused_total", "reason" => why.reason()).increment(1);
    let log = &LOGS[why as usize];
    log.allow().then(|| log.take_suppressed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_one_reason_lets_one_line_through_and_leaves_the_others_alone() {
        // The logs are process-wide; other tests may have used these reasons already.
        let first = (0..100)
            .filter(|_| refused(Refusal::MalformedKey).is_some())
            .count();
        assert!(first <= 1, "{first}");
        let _ = refused(Refusal::MissingKey);
        assert!(refused(Refusal::MissingKey).is_none());
    }
}
