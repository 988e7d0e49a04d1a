//! Windows of totals per minute (SPEC §20): units per fixed 60 s window aligned to the
//! epoch minute, UTC, kept in memory per account.
//!
//! Like the rate limits per second ([`super::rate`]), a fleet of `n` live replicas
//! shares each window: a replica forwards up to `allowance / n` units of an account in a
//! minute (at least one unit when the allowance is not 0), so the fleet's calls in one
//! window never pass the allowance by more than what calls already under way reported
//! after their last check. No PostgreSQL on the way: one sharded-map entry per account
//! with a minute window, replaced when the minute turns.
//!
//! Enforcement is check-then-spend: a call is refused only when the window is already
//! used up; a call that passes spends its route's cost at once, and a streamed call
//! spends what its usage events add as they arrive ([`MinuteWindows::spend`]), which is
//! where a stream is cut off once it takes the window past its allowance.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use dashmap::DashMap;

use super::rate::RateLimits;

/// Entries kept at most; past it, the windows of earlier minutes are dropped.
const MAX_ENTRIES: usize = 100_000;

/// The epoch minute containing `now`.
pub fn minute_of(now: DateTime<Utc>) -> i64 {
    now.timestamp().div_euclid(60)
}

/// Seconds from `now` to the next minute boundary, at least 1.
pub fn seconds_to_next_minute(now: DateTime<Utc>) -> i64 {
    let next = (minute_of(now) + 1) * 60;
    let millis = next * 1000 - now.timestamp_millis();
    // Rounded up: a client told to wait must not come back before the boundary.
    ((millis + 999) / 1000).max(1)
}

/// An account's minute as one replica sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinuteState {
    /// This replica's share of the allowance.
    pub allowance: i64,
    /// Units this replica forwarded in the minute.
    pub used: i64,
    /// Seconds until the window ends.
    pub reset_in: i64,
}

impl MinuteState {
    pub fn remaining(&self) -> i64 {
        (self.allowance - self.used).max(0)
    }

    /// Nothing left: the next call is refused.
    pub fn used_up(&self) -> bool {
        self.used >= self.allowance
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    minute: i64,
    used: i64,
}

/// This replica's minute windows. Cheap to clone.
#[derive(Clone)]
pub struct MinuteWindows {
    windows: Arc<DashMap<i64, Window>>,
    /// Whose replica count shares each window.
    replicas: RateLimits,
}

impl MinuteWindows {
    pub fn new(replicas: RateLimits) -> Self {
        Self {
            windows: Arc::new(DashMap::with_shard_amount(64)),
            replicas,
        }
    }

    /// This replica's share of `allowance`.
    fn share(&self, allowance: i64) -> i64 {
        let n = i64::from(self.replicas.replicas().max(1));
        if allowance <= 0 {
            0
        } else {
            (allowance / n).max(1)
        }
    }

    /// Where the account's minute stands at `now`, spending nothing.
    pub fn state(&self, account_id: i64, allowance: i64, now: DateTime<Utc>) -> MinuteState {
        let minute = minute_of(now);
        let used = self
            .windows
            .get(&account_id)
            .filter(|w| w.minute == minute)
            .map_or(0, |w| w.used);
        MinuteState {
            allowance: self.share(allowance),
            used,
            reset_in: seconds_to_next_minute(now),
        }
    }

    /// Spends `units` of the account's minute at `now`; the minute as it stands after.
    pub fn spend(
        &self,
        account_id: i64,
        allowance: i64,
        units: i64,
        now: DateTime<Utc>,
    ) -> MinuteState {
        let minute = minute_of(now);
        let mut window = match self.windows.get_mut(&account_id) {
            Some(window) => window,
            None => {
                // Counting the entries locks every shard: only when one is added.
                if self.windows.len() >= MAX_ENTRIES {
                    self.windows.retain(|_, w| w.minute == minute);
                }
                self.windows
                    .entry(account_id)
                    .or_insert(Window { minute, used: 0 })
            }
        };
        if window.minute != minute {
            *window = Window { minute, used: 0 };
        }
        window.used = window.used.saturating_add(units.max(0));
        MinuteState {
            allowance: self.share(allowance),
            used: window.used,
            reset_in: seconds_to_next_minute(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_window_is_the_epoch_minute_and_the_wait_runs_to_its_end() {
        assert_eq!(seconds_to_next_minute(at("2026-12-08T10:00:00Z")), 60);
        assert_eq!(seconds_to_next_minute(at("2026-12-08T10:00:59.001Z")), 1);
        assert_eq!(seconds_to_next_minute(at("2026-12-08T10:00:58.5Z")), 2);
        assert_eq!(
            minute_of(at("2026-12-08T10:00:59.999Z")) + 1,
            minute_of(at("2026-12-08T10:01:00Z"))
        );
    }

    #[test]
    fn units_spent_in_a_minute_are_forgotten_when_the_next_begins() {
        let windows = MinuteWindows::new(RateLimits::new());
        let t = at("2026-12-08T10:00:10Z");
        assert!(!windows.state(7, 3, t).used_up());
        windows.spend(7, 3, 2, t);
        let after = windows.spend(7, 3, 1, at("2026-12-08T10:00:59.9Z"));
        assert!(after.used_up());
        assert_eq!(after.remaining(), 0);
        assert_eq!(windows.state(8, 3, t).used, 0, "accounts are apart");
        let next = windows.state(7, 3, at("2026-12-08T10:01:00Z"));
        assert_eq!((next.used, next.remaining()), (0, 3));
    }

    #[test]
    fn replicas_share_a_window() {
        let limits = RateLimits::new();
        let windows = MinuteWindows::new(limits.clone());
        limits.set_replicas(2);
        let t = at("2026-12-08T10:00:10Z");
        assert_eq!(windows.state(1, 10, t).allowance, 5);
        assert_eq!(windows.state(1, 1, t).allowance, 1, "at least one unit");
        assert_eq!(windows.state(1, 0, t).allowance, 0);
        assert!(windows.state(1, 0, t).used_up());
    }
}
