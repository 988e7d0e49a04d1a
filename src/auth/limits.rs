//! Keyed attempt limits (SPEC §2 `account.*`, §11), kept per replica in memory.
//!
//! A [`KeyedLimit`] is a keyed GCRA ([`governor`]): `n` per hour is a burst of `n`, then
//! one more every `3600 / n` seconds; a refusal says how long until the next one fits.
//! A [`FailureLimiter`] counts failures per subject (an account, an email's hash) and per
//! client address. An attempt is judged *before* it is tried — past the limit it is
//! refused with `429 TOO_MANY_REQUESTS` and a `Retry-After` even when it would have
//! succeeded — and only failures are counted, so judging must not count:
//! [`KeyedLimit::peek`] decides on the stored state without changing it. Attempts that
//! all pass the check before any of them fails may overshoot by the attempts in flight.
//!
//! Client addresses count IPv6 by its /64 (one host usually holds a whole /64). Memory is
//! bounded: `housekeep` drops keys back at a fresh state (run every minute), and a limit
//! holding [`MAX_KEYS`] keys drops its stale ones, or else starts over, before it takes a
//! new one.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};
use governor::state::{NotKeyed, StateStore};
use governor::{Quota, RateLimiter};

use crate::error::ApiError;
use crate::telemetry::RateLimitedLog;

/// Most keys one count holds.
pub const MAX_KEYS: usize = 100_000;

/// Failures per subject `K` and per client address, `n` an hour each.
pub struct FailureLimiter<K: Hash + Eq + Clone, C: Clock = DefaultClock> {
    kind: &'static str,
    by_subject: KeyedLimit<K, C>,
    by_ip: KeyedLimit<IpAddr, C>,
}

impl<K: Hash + Eq + Clone> FailureLimiter<K> {
    /// A limiter of `per_hour` failures (at least 1) for attempts of `kind` (a metric label).
    pub fn per_hour(kind: &'static str, per_hour: u32) -> Self {
        Self::with_clock(kind, per_hour, DefaultClock::default())
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> FailureLimiter<K, C> {
    pub fn with_clock(kind: &'static str, per_hour: u32, clock: C) -> Self {
        Self {
            kind,
            by_subject: KeyedLimit::per_hour(per_hour, clock.clone()),
            by_ip: KeyedLimit::per_hour(per_hour, clock),
        }
    }

    /// Whether `subject` may try from `ip` now; counts nothing.
    pub fn allowed(&self, subject: &K, ip: IpAddr) -> Result<(), ApiError> {
        let by_subject = self.by_subject.peek(subject);
        let by_ip = self.by_ip.peek(&client_key(ip));
        match (by_subject, by_ip) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(a), Err(b)) => Err(refused(self.kind, a.max(b))),
            (Err(wait), _) | (_, Err(wait)) => Err(refused(self.kind, wait)),
        }
    }

    /// Counts one failed attempt of `subject` from `ip`.
    pub fn failed(&self, subject: &K, ip: IpAddr) {
        let _ = self.by_subject.check(subject);
        let _ = self.by_ip.check(&client_key(ip));
    }

    /// Drops the keys whose state is back at fresh.
    pub fn housekeep(&self) {
        self.by_subject.housekeep();
        self.by_ip.housekeep();
    }
}

/// The refusal of an attempt of `kind` that has to wait `wait`, counted in metrics.
pub fn refused(kind: &'static str, wait: Duration) -> ApiError {
    metrics::counter!("tollgate_account_limited_total", "kind" => kind).increment(1);
    ApiError::TooManyRequests {
        retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
    }
}

/// The key an address counts under: IPv4 as is, IPv6 by its /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

/// A key as the store sees it: a counting check, or a peek that stores nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Probe<K> {
    key: K,
    peek: bool,
}

/// governor's DashMap store that also answers peeks: the GCRA decides on the stored
/// state, and a peek's decision is never written back.
struct PeekableStore<K: Hash + Eq + Clone>(Arc<DashMapStateStore<K>>);

impl<K: Hash + Eq + Clone> StateStore for PeekableStore<K> {
    type Key = Probe<K>;

    fn measure_and_replace<T, F, E>(&self, probe: &Probe<K>, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        if !probe.peek {
            return self.0.measure_and_replace(&probe.key, f);
        }
        let Some(state) = self.0.get(&probe.key) else {
            return f(None).map(|(decision, _)| decision);
        };
        // The closure never answers `Ok`, so the stored state is never replaced.
        let outcome = state.measure_and_replace(&NotKeyed::NonKey, |tat| {
            Err::<(std::convert::Infallible, Nanos), _>(f(tat).map(|(decision, _)| decision))
        });
        match outcome {
            Ok(never) => match never {},
            Err(decision) => decision,
        }
    }
}

impl<K: Hash + Eq + Clone> ShrinkableKeyedStateStore<Probe<K>> for PeekableStore<K> {
    fn retain_recent(&self, drop_below: Nanos) {
        ShrinkableKeyedStateStore::retain_recent(&*self.0, drop_below);
    }

    fn shrink_to_fit(&self) {
        ShrinkableKeyedStateStore::shrink_to_fit(&*self.0);
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One keyed limit of `n` per hour.
pub struct KeyedLimit<K: Hash + Eq + Clone, C: Clock = DefaultClock> {
    limiter: RateLimiter<Probe<K>, PeekableStore<K>, C, NoOpMiddleware<C::Instant>>,
    keys: Arc<DashMapStateStore<K>>,
}

static FULL_LOG: LazyLock<RateLimitedLog> = LazyLock::new(RateLimitedLog::default);

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimit<K, C> {
    pub fn per_hour(n: u32, clock: C) -> Self {
        let quota = Quota::per_hour(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN));
        let keys = Arc::new(DashMapStateStore::default());
        Self {
            limiter: RateLimiter::new(quota, PeekableStore(Arc::clone(&keys)), clock),
            keys,
        }
    }

    /// Counts one event of `key`; when it does not fit, how long until one would.
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        if self.keys.len() >= MAX_KEYS && !self.keys.contains_key(key) {
            self.make_room();
        }
        self.decide(key, false)
    }

    /// Whether one more event of `key` would fit now, counting nothing.
    pub fn peek(&self, key: &K) -> Result<(), Duration> {
        self.decide(key, true)
    }

    /// Drops the keys whose state is back at fresh.
    pub fn housekeep(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn decide(&self, key: &K, peek: bool) -> Result<(), Duration> {
        let probe = Probe {
            key: key.clone(),
            peek,
        };
        self.limiter
            .check_key(&probe)
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }

    /// A full limit drops its stale keys; if every key is live it starts over (the
    /// limit fails open for those keys rather than refusing everyone or growing).
    fn make_room(&self) {
        self.limiter.retain_recent();
        if self.keys.len() >= MAX_KEYS {
            self.keys.clear();
            metrics::counter!("tollgate_account_limit_resets_total").increment(1);
            if FULL_LOG.allow() {
                tracing::warn!(
                    max_keys = MAX_KEYS,
                    suppressed = FULL_LOG.take_suppressed(),
                    "an account limit was full of live keys and started over"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use governor::clock::FakeRelativeClock;

    use super::*;

    const HOME: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const AWAY: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    fn retry_after(result: Result<(), ApiError>) -> u64 {
        match result {
            Err(ApiError::TooManyRequests { retry_after_secs }) => retry_after_secs,
            other => panic!("expected 429, got {other:?}"),
        }
    }

    #[test]
    fn judging_counts_nothing_and_the_eleventh_attempt_waits_six_minutes() {
        let clock = FakeRelativeClock::default();
        let limits = FailureLimiter::<i64, _>::with_clock("redeem", 10, clock.clone());
        for _ in 0..100 {
            limits.allowed(&7, HOME).unwrap();
        }
        for _ in 0..10 {
            limits.allowed(&7, HOME).unwrap();
            limits.failed(&7, HOME);
        }
        // Ten an hour: the next failure fits six minutes on, by account or by address.
        assert_eq!(retry_after(limits.allowed(&7, AWAY)), 360);
        assert_eq!(retry_after(limits.allowed(&8, HOME)), 360);
        limits.allowed(&8, AWAY).unwrap();
        clock.advance(Duration::from_secs(359));
        assert_eq!(retry_after(limits.allowed(&7, HOME)), 1);
        clock.advance(Duration::from_secs(1));
        limits.allowed(&7, HOME).unwrap();
    }

    #[test]
    fn ipv6_clients_count_by_their_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(client_key(mapped), HOME);
    }

    #[test]
    fn keys_back_at_fresh_are_dropped_by_housekeeping() {
        let clock = FakeRelativeClock::default();
        let limit = KeyedLimit::per_hour(10, clock.clone());
        limit.check(&1u32).unwrap();
        limit.check(&2u32).unwrap();
        limit.peek(&3u32).unwrap();
        assert_eq!(limit.len(), 2, "a peek stores nothing");
        clock.advance(Duration::from_secs(3600));
        limit.housekeep();
        assert!(limit.is_empty());
    }
}
