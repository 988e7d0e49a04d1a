//! When a failed delivery is tried again, and when it is given up (SPEC §7).
//!
//! Exponential back-off with jitter: after the `n`-th failed attempt the next one waits
//! `d = min(retry_initial × 2^(n−1), retry_max)`, drawn uniformly from `[d/2, d)` so
//! that events failing together do not come back together. Attempts go on for
//! [`GIVE_UP_AFTER`] from the event's recording; the last wait is shortened so one
//! attempt is made at the end of that window, and a failure after it gives up.
//! With the defaults (10 s, at most 1 h) the waits are about 10 s, 20 s, 40 s, … then
//! 30 to 60 minutes: 33 to 57 attempts in all. Pure: the jitter and the age are
//! arguments.

use std::time::Duration;

/// How long an event is retried, counted from the moment it was recorded.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The retry schedule (`notify.retry_initial_ms`, `notify.retry_max_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub initial: Duration,
    pub max: Duration,
    pub window: Duration,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again after this long.
    RetryIn(Duration),
    /// The window is over: mark the event failed.
    GiveUp,
}

impl Schedule {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            window: GIVE_UP_AFTER,
        }
    }

    /// The ceiling `d` of the wait after `attempts` failed attempts (1 = the first).
    pub fn ceiling(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(32);
        self.initial
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max)
    }

    /// After `attempts` failed attempts (this one included) of an event recorded `age`
    /// ago; `jitter` in `[0, 1)` picks the wait within `[d/2, d)`.
    pub fn after_failure(&self, attempts: u32, age: Duration, jitter: f64) -> AfterFailure {
        let Some(left) = self.window.checked_sub(age).filter(|l| !l.is_zero()) else {
            return AfterFailure::GiveUp;
        };
        let ceiling = self.ceiling(attempts);
        let half = ceiling / 2;
        let wait = half + half.mul_f64(jitter.clamp(0.0, 1.0));
        AfterFailure::RetryIn(wait.min(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn defaults() -> Schedule {
        Schedule::new(10 * SECOND, 3600 * SECOND)
    }

    #[test]
    fn waits_double_from_the_first_and_stop_growing_at_the_maximum() {
        let s = defaults();
        let ceilings: Vec<u64> = (1..=11).map(|n| s.ceiling(n).as_secs()).collect();
        assert_eq!(
            ceilings,
            [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600]
        );
        assert_eq!(s.ceiling(1_000), 3600 * SECOND);
    }

    #[test]
    fn jitter_picks_a_wait_between_half_and_all_of_the_ceiling() {
        let s = defaults();
        assert_eq!(
            s.after_failure(1, SECOND, 0.0),
            AfterFailure::RetryIn(5 * SECOND)
        );
        assert_eq!(
            s.after_failure(3, SECOND, 0.5),
            AfterFailure::RetryIn(30 * SECOND)
        );
        let AfterFailure::RetryIn(wait) = s.after_failure(2, SECOND, 0.999_999) else {
            panic!("retried");
        };
        assert!(wait < 20 * SECOND && wait > 19 * SECOND, "{wait:?}");
    }

    #[test]
    fn the_last_wait_ends_with_the_window_and_a_failure_after_it_gives_up() {
        let s = defaults();
        let almost = GIVE_UP_AFTER - 100 * SECOND;
        assert_eq!(
            s.after_failure(30, almost, 0.9),
            AfterFailure::RetryIn(100 * SECOND)
        );
        assert_eq!(
            s.after_failure(31, GIVE_UP_AFTER, 0.0),
            AfterFailure::GiveUp
        );
        assert_eq!(
            s.after_failure(1, GIVE_UP_AFTER + SECOND, 0.0),
            AfterFailure::GiveUp
        );
    }

    #[test]
    fn the_defaults_try_an_event_33_to_57_times_in_a_day() {
        let s = defaults();
        let attempts_with = |jitter: f64| {
            let (mut age, mut attempts) = (Duration::ZERO, 1u32);
            while let AfterFailure::RetryIn(wait) = s.after_failure(attempts, age, jitter) {
                age += wait;
                attempts += 1;
            }
            assert_eq!(age, GIVE_UP_AFTER);
            attempts
        };
        assert_eq!(attempts_with(1.0), 33);
        assert_eq!(attempts_with(0.0), 57);
    }
}
