//! Abuse limits of the account API (SPEC §2 `account.*`), kept per replica in memory.
//!
//! Each limit is a keyed GCRA ([`governor`]): `n` per hour is a burst of `n`, then one
//! more every `3600 / n` seconds; a refusal says how long until the next one fits
//! (`Retry-After`). Signups count per client address; failed logins count per email
//! and per client address. A login is checked *before* its password is verified (a
//! guesser past the limit gets no answer about the password, and costs no hash) and
//! only failures are counted, so checking must not use up anything: [`KeyedLimit::peek`]
//! decides on the stored state without changing it. Concurrent attempts that all peek
//! before any of them fails may overshoot by at most the hashes in flight.
//!
//! Client addresses are the peer address, IPv6 by its /64 (one host usually holds a
//! whole /64); emails are kept as a keyed 64-bit hash, never in clear. Memory is
//! bounded: [`AccountLimits::housekeep`] drops keys back at a fresh state (run every
//! minute), and a limit holding [`MAX_KEYS`] keys drops its stale ones, or else starts
//! over, before it takes a new one.

use std::hash::{BuildHasher, Hash, RandomState};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};
use governor::state::{NotKeyed, StateStore};
use governor::{Quota, RateLimiter};

use crate::config::AccountConfig;
use crate::error::ApiError;
use crate::state::AppState;
use crate::telemetry::RateLimitedLog;

/// Most keys one limit holds.
pub const MAX_KEYS: usize = 100_000;

/// The limits of one replica. Generic over the clock so tests can move time.
pub struct AccountLimits<C: Clock = DefaultClock> {
    signups: KeyedLimit<IpAddr, C>,
    failures_by_email: KeyedLimit<u64, C>,
    failures_by_ip: KeyedLimit<IpAddr, C>,
    emails: RandomState,
}

impl AccountLimits {
    pub fn new(config: &AccountConfig) -> Self {
        Self::with_clock(config, DefaultClock::default())
    }
}

impl<C: Clock + Clone> AccountLimits<C> {
    pub fn with_clock(config: &AccountConfig, clock: C) -> Self {
        Self {
            signups: KeyedLimit::per_hour(config.signups_per_ip_per_hour, clock.clone()),
            failures_by_email: KeyedLimit::per_hour(config.login_failures_per_hour, clock.clone()),
            failures_by_ip: KeyedLimit::per_hour(config.login_failures_per_hour, clock),
            emails: RandomState::new(),
        }
    }

    /// Counts a signup from `ip`; refused past `account.signups_per_ip_per_hour`.
    pub fn signup(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.signups
            .check(&client_key(ip))
            .map_err(|wait| refused("signup", wait))
    }

    /// Whether a login of `email` from `ip` may be tried; counts nothing.
    pub fn login_allowed(&self, email: &str, ip: IpAddr) -> Result<(), ApiError> {
        let by_email = self.failures_by_email.peek(&self.email_key(email));
        let by_ip = self.failures_by_ip.peek(&client_key(ip));
        match (by_email, by_ip) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(a), Err(b)) => Err(refused("login", a.max(b))),
            (Err(wait), _) | (_, Err(wait)) => Err(refused("login", wait)),
        }
    }

    /// Counts a failed login of `email` from `ip`.
    pub fn login_failed(&self, email: &str, ip: IpAddr) {
        let _ = self.failures_by_email.check(&self.email_key(email));
        let _ = self.failures_by_ip.check(&client_key(ip));
    }

    /// Drops the keys whose state is back at fresh.
    pub fn housekeep(&self) {
        self.signups.housekeep();
        self.failures_by_email.housekeep();
        self.failures_by_ip.housekeep();
    }

    fn email_key(&self, email: &str) -> u64 {
        self.emails.hash_one(email)
    }
}

/// The address a request's limits count under: its TCP peer. (`X-Forwarded-For` is not
/// read; behind a load balancer every client would share the balancer's address.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = std::convert::Infallible;

    /// The peer, or behind `server.trusted_proxies` the client they forwarded for. A
    /// router served without connect info (no peer known) counts as `0.0.0.0`.
    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |peer| peer.0.ip());
        Ok(ClientIp(crate::client_ip::client_ip(
            peer,
            &parts.headers,
            &state.config.server.trusted_proxies,
        )))
    }
}

/// The key a client address counts under: IPv4 as is, IPv6 by its /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

fn refused(what: &'static str, wait: Duration) -> ApiError {
    metrics::counter!("tollgate_account_limited_total", "kind" => what).increment(1);
    ApiError::TooManyRequests {
        retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
    }
}

/// A key as the limiter's store sees it: a counting check, or a peek that stores nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Probe<K> {
    key: K,
    peek: bool,
}

/// governor's DashMap store, which also answers peeks: the GCRA decides on the stored
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
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn limits(clock: &FakeRelativeClock) -> AccountLimits<FakeRelativeClock> {
        AccountLimits::with_clock(&AccountConfig::default(), clock.clone())
    }

    fn retry_after(result: Result<(), ApiError>) -> u64 {
        match result {
            Err(ApiError::TooManyRequests { retry_after_secs }) => retry_after_secs,
            other => panic!("expected 429, got {other:?}"),
        }
    }

    const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const AWAY: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    #[test]
    fn the_twentieth_signup_passes_and_the_21st_waits_three_minutes() {
        let clock = FakeRelativeClock::default();
        let limits = limits(&clock);
        for _ in 0..20 {
            limits.signup(HOME).unwrap();
        }
        assert_eq!(retry_after(limits.signup(HOME)), 180);
        limits.signup(AWAY).unwrap();
        clock.advance(Duration::from_secs(179));
        assert_eq!(retry_after(limits.signup(HOME)), 1);
        clock.advance(Duration::from_secs(1));
        limits.signup(HOME).unwrap();
        assert!(limits.signup(HOME).is_err());
    }

    #[test]
    fn peeking_counts_nothing_and_ten_failures_close_the_door() {
        let clock = FakeRelativeClock::default();
        let limits = limits(&clock);
        for _ in 0..100 {
            limits.login_allowed("ann@example.com", HOME).unwrap();
        }
        for _ in 0..9 {
            limits.login_failed("ann@example.com", HOME);
        }
        limits.login_allowed("ann@example.com", HOME).unwrap();
        limits.login_failed("ann@example.com", HOME);
        // Ten an hour: the next failure fits six minutes on.
        assert_eq!(
            retry_after(limits.login_allowed("ann@example.com", AWAY)),
            360
        );
        assert_eq!(
            retry_after(limits.login_allowed("bob@example.com", HOME)),
            360
        );
        limits.login_allowed("bob@example.com", AWAY).unwrap();
        clock.advance(Duration::from_secs(360));
        limits.login_allowed("ann@example.com", HOME).unwrap();
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
