//! The call budgets that keep one API token under Cloudflare's rate limit.
//!
//! Cloudflare allows about 1,200 API calls per 5 minutes per token and, past that, blocks
//! every call of the token for 5 minutes. [`CallBudget`] is this process's sliding window:
//! at most `max_calls` calls in any span of `window`. Each KV call takes one permit before it
//! goes to the network; with none left the call is refused locally. Time is passed in so
//! tests can stand on the exact edge of the window.
//!
//! The limit is per token, though, not per process: a [`SharedBudget`] (when configured)
//! counts the calls of every process on the token, and a call goes out only when both grant
//! it. The local budget is the fast path: a process that has spent it asks no one.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::lock;

/// A sliding-window limiter: at most `max_calls` permits in any window of `window`.
///
/// A permit granted at `t` counts against every window that contains `t`, and stops counting
/// at exactly `t + window`. Refused attempts take nothing.
pub struct CallBudget {
    max_calls: u32,
    window: Duration,
    /// When each permit still inside the window was granted, oldest first.
    granted: Mutex<VecDeque<Instant>>,
}

impl CallBudget {
    /// Default permits per window: a margin below Cloudflare's ~1,200 per 5 minutes.
    pub const DEFAULT_MAX_CALLS: u32 = 1_000;
    /// Default window: Cloudflare's 5 minutes.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(300);

    /// A budget of `max_calls` calls in any window of `window`.
    pub fn new(max_calls: u32, window: Duration) -> Self {
        Self {
            max_calls,
            window,
            granted: Mutex::new(VecDeque::new()),
        }
    }

    /// Takes one permit at `now` if the window ending at `now` has one left.
    pub fn try_acquire(&self, now: Instant) -> bool {
        self.try_acquire_leaving(now, 0)
    }

    /// Takes one permit at `now` only if `reserve` more would still be left afterwards,
    /// so lower-priority calls can never spend the permits kept for others.
    pub fn try_acquire_leaving(&self, now: Instant, reserve: u32) -> bool {
        let mut granted = lock(&self.granted);
        self.forget_expired(&mut granted, now);
        if granted.len() + reserve as usize >= self.max_calls as usize {
            return false;
        }
        // Keep the queue ordered even if a caller hands in an earlier instant than before;
        // recording the later one is the conservative choice.
        let stamp = granted.back().map_or(now, |&last| last.max(now));
        granted.push_back(stamp);
        true
    }

    /// Gives back the permit taken last (the shared budget refused the call it was for).
    pub fn refund(&self) {
        lock(&self.granted).pop_back();
    }

    /// Permits still available at `now`.
    pub fn remaining(&self, now: Instant) -> u32 {
        let mut granted = lock(&self.granted);
        self.forget_expired(&mut granted, now);
        let used = u32::try_from(granted.len()).unwrap_or(u32::MAX);
        self.max_calls.saturating_sub(used)
    }

    /// Most permits in any window.
    pub fn max_calls(&self) -> u32 {
        self.max_calls
    }

    /// Length of the sliding window.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn forget_expired(&self, granted: &mut VecDeque<Instant>, now: Instant) {
        while let Some(&oldest) = granted.front() {
            if now.saturating_duration_since(oldest) >= self.window {
                granted.pop_front();
            } else {
                break;
            }
        }
    }
}

/// A budget shared by every process calling Cloudflare with one token (kept, for tollgate,
/// in PostgreSQL). It must bound the calls of all of them together to its `max_calls` in
/// any window; an implementation that cannot tell (its store is unreachable) refuses.
#[async_trait::async_trait]
pub trait SharedBudget: Send + Sync + fmt::Debug {
    /// Takes one permit only if `reserve` more would still be left afterwards.
    async fn try_acquire_leaving(&self, reserve: u32) -> bool;
}

impl Default for CallBudget {
    fn default() -> Self {
        Self::new(Self::DEFAULT_MAX_CALLS, Self::DEFAULT_WINDOW)
    }
}

impl fmt::Debug for CallBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallBudget")
            .field("max_calls", &self.max_calls)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(300);
    const NANO: Duration = Duration::from_nanos(1);

    fn take(budget: &CallBudget, now: Instant, times: u32) -> u32 {
        (0..times).filter(|_| budget.try_acquire(now)).count() as u32
    }

    #[test]
    fn grants_exactly_max_calls_within_one_window() {
        let budget = CallBudget::new(5, WINDOW);
        let t0 = Instant::now();
        assert_eq!(take(&budget, t0, 5), 5);
        assert!(!budget.try_acquire(t0));
        assert!(!budget.try_acquire(t0 + WINDOW - NANO));
        assert_eq!(budget.remaining(t0), 0);
    }

    #[test]
    fn a_permit_returns_exactly_one_window_after_it_was_taken() {
        let budget = CallBudget::new(1, WINDOW);
        let t0 = Instant::now();
        assert!(budget.try_acquire(t0));
        assert!(!budget.try_acquire(t0 + WINDOW - NANO));
        assert!(budget.try_acquire(t0 + WINDOW));
        assert!(!budget.try_acquire(t0 + WINDOW));
    }

    #[test]
    fn the_window_slides_one_permit_at_a_time() {
        let budget = CallBudget::new(3, WINDOW);
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        assert!(budget.try_acquire(t0));
        assert!(budget.try_acquire(t0 + second));
        assert!(budget.try_acquire(t0 + 2 * second));
        assert!(!budget.try_acquire(t0 + 2 * second));
        // Only the permit taken at t0 has left the window.
        assert_eq!(budget.remaining(t0 + WINDOW), 1);
        assert!(budget.try_acquire(t0 + WINDOW));
        assert!(!budget.try_acquire(t0 + WINDOW + second - NANO));
        assert!(budget.try_acquire(t0 + WINDOW + second));
    }

    #[test]
    fn a_full_window_later_the_whole_budget_is_back() {
        let budget = CallBudget::new(1_000, WINDOW);
        let t0 = Instant::now();
        assert_eq!(take(&budget, t0, 1_200), 1_000);
        assert_eq!(budget.remaining(t0 + WINDOW), 1_000);
        assert_eq!(take(&budget, t0 + WINDOW, 1_200), 1_000);
    }

    #[test]
    fn refused_attempts_do_not_use_up_permits() {
        let budget = CallBudget::new(2, WINDOW);
        let t0 = Instant::now();
        assert_eq!(take(&budget, t0, 2), 2);
        assert_eq!(take(&budget, t0 + Duration::from_secs(10), 50), 0);
        // The refused attempts at t0 + 10 s did not push the refill later.
        assert_eq!(take(&budget, t0 + WINDOW, 3), 2);
    }

    #[test]
    fn a_zero_budget_never_grants() {
        let budget = CallBudget::new(0, WINDOW);
        let t0 = Instant::now();
        assert!(!budget.try_acquire(t0));
        assert!(!budget.try_acquire(t0 + 10 * WINDOW));
    }

    #[test]
    fn an_earlier_instant_is_counted_conservatively() {
        let budget = CallBudget::new(2, WINDOW);
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(100);
        assert!(budget.try_acquire(later));
        assert!(budget.try_acquire(t0));
        assert!(!budget.try_acquire(later));
        // Both permits count as taken at `later`, so both return together.
        assert_eq!(budget.remaining(later + WINDOW - NANO), 0);
        assert_eq!(budget.remaining(later + WINDOW), 2);
    }

    #[test]
    fn the_default_is_a_thousand_calls_per_five_minutes() {
        let budget = CallBudget::default();
        assert_eq!(budget.max_calls(), 1_000);
        assert_eq!(budget.window(), Duration::from_secs(300));
    }

    #[test]
    fn a_refunded_permit_can_be_taken_again() {
        let budget = CallBudget::new(1, WINDOW);
        let t0 = Instant::now();
        assert!(budget.try_acquire(t0));
        budget.refund();
        assert_eq!(budget.remaining(t0), 1);
        assert!(budget.try_acquire(t0));
        assert!(!budget.try_acquire(t0));
    }

    #[test]
    fn a_reserve_keeps_permits_for_other_calls() {
        let budget = CallBudget::new(10, WINDOW);
        let t0 = Instant::now();
        let low = (0..20)
            .filter(|_| budget.try_acquire_leaving(t0, 2))
            .count();
        assert_eq!(low, 8);
        assert!(budget.try_acquire(t0));
        assert!(budget.try_acquire(t0));
        assert!(!budget.try_acquire(t0));
    }
}
