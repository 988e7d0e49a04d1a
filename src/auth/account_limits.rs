//! Abuse limits of the account API (SPEC §2 `account.*`, §11), kept per replica in memory.
//!
//! Signups count per client address; failed logins per email and per client address;
//! failed redemptions per account and per client address, at the login-failure rate. The
//! counting itself ([`KeyedLimit`], [`FailureLimiter`]) lives in `auth::limits`. A login
//! is checked *before* its password is verified: a guesser past the limit gets no answer
//! about the password, and costs no hash. Emails are kept as a keyed 64-bit hash, never
//! in clear.

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;

use governor::clock::{Clock, DefaultClock};

use super::limits::{FailureLimiter, KeyedLimit, client_key, refused};
use crate::config::AccountConfig;
use crate::error::ApiError;

/// The limits of one replica. Generic over the clock so tests can move time.
pub struct AccountLimits<C: Clock = DefaultClock> {
    signups: KeyedLimit<IpAddr, C>,
    logins: FailureLimiter<u64, C>,
    redemptions: FailureLimiter<i64, C>,
    emails: RandomState,
}

impl AccountLimits {
    pub fn new(config: &AccountConfig) -> Self {
        Self::with_clock(config, DefaultClock::default())
    }
}

impl<C: Clock + Clone> AccountLimits<C> {
    pub fn with_clock(config: &AccountConfig, clock: C) -> Self {
        let failures = config.login_failures_per_hour;
        Self {
            signups: KeyedLimit::per_hour(config.signups_per_ip_per_hour, clock.clone()),
            logins: FailureLimiter::with_clock("login", failures, clock.clone()),
            redemptions: FailureLimiter::with_clock("redeem", failures, clock),
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
        self.logins.allowed(&self.email_key(email), ip)
    }

    /// Counts a failed login of `email` from `ip`.
    pub fn login_failed(&self, email: &str, ip: IpAddr) {
        self.logins.failed(&self.email_key(email), ip);
    }

    /// Whether `account_id` may try a redemption code from `ip`; counts nothing.
    pub fn redeem_allowed(&self, account_id: i64, ip: IpAddr) -> Result<(), ApiError> {
        self.redemptions.allowed(&account_id, ip)
    }

    /// Counts a failed redemption (unknown, used or expired code).
    pub fn redeem_failed(&self, account_id: i64, ip: IpAddr) {
        self.redemptions.failed(&account_id, ip);
    }

    /// Drops the keys whose state is back at fresh.
    pub fn housekeep(&self) {
        self.signups.housekeep();
        self.logins.housekeep();
        self.redemptions.housekeep();
    }

    fn email_key(&self, email: &str) -> u64 {
        self.emails.hash_one(email)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

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

    const HOME: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const AWAY: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

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
    fn redemption_failures_count_apart_from_login_failures() {
        let clock = FakeRelativeClock::default();
        let limits = limits(&clock);
        for _ in 0..10 {
            limits.redeem_failed(7, HOME);
        }
        assert_eq!(retry_after(limits.redeem_allowed(7, AWAY)), 360);
        assert_eq!(retry_after(limits.redeem_allowed(8, HOME)), 360);
        limits.redeem_allowed(8, AWAY).unwrap();
        limits.login_allowed("ann@example.com", HOME).unwrap();
    }
}
