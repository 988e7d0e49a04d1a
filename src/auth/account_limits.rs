//! Abuse limits of the account, admin and console sign-in paths (SPEC §2 `account.*`,
//! §11, §21), held fleet-wide in PostgreSQL through [`Attempts`].
//!
//! - Signups count per client address (`account.signups_per_ip_per_hour`).
//! - A login is counted *before* its password is verified, per client address and per
//!   (email, address) pair, and given back when it succeeds: only failures stay counted,
//!   a guesser past either limit gets no answer about the password and costs no hash, and
//!   the bound holds however many replicas or concurrent requests share it. Failures
//!   are also counted per email alone, but that count only slows the email's sign-in
//!   ([`EMAIL_SLOWDOWN`]): it never refuses the right password from an address that has
//!   not failed, so nobody can lock a customer out by guessing at their email.
//! - Redemptions follow the login rule per account and per address.
//! - Failed admin-token authentications (admin API and console sign-in) count per client
//!   address (`admin.failures_per_hour`); past it even the right token is refused.
//!
//! Client addresses count IPv6 by its /64; emails are kept as a hash, never in clear.

use std::net::IpAddr;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::attempts::{self, Attempts, Cell, Limit};
use super::limits::refused;
use crate::config::Config;
use crate::error::ApiError;

/// How long a sign-in of an email that failed past its limit (from whatever addresses)
/// is held before its password is checked.
pub const EMAIL_SLOWDOWN: Duration = Duration::from_secs(1);

/// The fleet's abuse limits.
#[derive(Clone)]
pub struct AccountLimits {
    attempts: Attempts,
    signups: Limit,
    failures: Limit,
    admin_failures: Limit,
}

/// A login or redemption counted before it is tried: settle it with
/// [`AccountLimits::give_back`] or [`AccountLimits::failed`].
#[derive(Debug)]
pub struct Attempt {
    taken: Vec<Cell>,
    /// Counted on failure only: it slows, never refuses.
    slows: Option<Cell>,
    /// Whether the subject's sign-in is to be slowed.
    pub slowed: bool,
}

impl AccountLimits {
    pub fn new(attempts: Attempts, config: &Config) -> Self {
        Self {
            attempts,
            signups: Limit::per_hour(config.account.signups_per_ip_per_hour),
            failures: Limit::per_hour(config.account.login_failures_per_hour),
            admin_failures: Limit::per_hour(config.admin.failures_per_hour),
        }
    }

    /// Counts a signup from `ip`; refused past `account.signups_per_ip_per_hour`.
    pub async fn signup(&self, ip: IpAddr, now: DateTime<Utc>) -> Result<(), ApiError> {
        let cell = Cell::new(format!("signup:ip:{}", attempts::address(ip)), self.signups);
        self.attempts
            .take(&[cell], now)
            .await?
            .map_err(|wait| refused("signup", wait))
    }

    /// Counts a login of `email` from `ip` before it is tried; refused past the failure
    /// limit of the address or of the pair.
    pub async fn login(
        &self,
        email: &str,
        ip: IpAddr,
        now: DateTime<Utc>,
    ) -> Result<Attempt, ApiError> {
        let address = attempts::address(ip);
        let email = attempts::email(email);
        let taken = vec![
            Cell::new(format!("login:ip:{address}"), self.failures),
            Cell::new(format!("login:pair:{email}:{address}"), self.failures),
        ];
        let slows = Cell::new(format!("login:email:{email}"), self.failures);
        self.begin("login", taken, Some(slows), now).await
    }

    /// Counts a redemption of `account_id` from `ip` before it is tried.
    pub async fn redeem(
        &self,
        account_id: i64,
        ip: IpAddr,
        now: DateTime<Utc>,
    ) -> Result<Attempt, ApiError> {
        let taken = vec![
            Cell::new(
                format!("redeem:ip:{}", attempts::address(ip)),
                self.failures,
            ),
            Cell::new(format!("redeem:account:{account_id}"), self.failures),
        ];
        self.begin("redeem", taken, None, now).await
    }

    async fn begin(
        &self,
        kind: &'static str,
        taken: Vec<Cell>,
        slows: Option<Cell>,
        now: DateTime<Utc>,
    ) -> Result<Attempt, ApiError> {
        if let Err(wait) = self.attempts.take(&taken, now).await? {
            return Err(refused(kind, wait));
        }
        let slowed = match &slows {
            Some(cell) => !self
                .attempts
                .wait(std::slice::from_ref(cell), now)
                .await?
                .is_zero(),
            None => false,
        };
        Ok(Attempt {
            taken,
            slows,
            slowed,
        })
    }

    /// The attempt succeeded, or ended in something other than a failed guess (the
    /// database or the hashing queue): what it counted is given back.
    pub async fn give_back(&self, attempt: Attempt, now: DateTime<Utc>) -> Result<(), ApiError> {
        self.attempts.refund(&attempt.taken, now).await?;
        Ok(())
    }

    /// The attempt failed: it stays counted, and counts toward its subject's slowdown.
    pub async fn failed(&self, attempt: Attempt, now: DateTime<Utc>) -> Result<(), ApiError> {
        if let Some(cell) = attempt.slows {
            self.attempts.count(&[cell], now).await?;
        }
        Ok(())
    }

    /// Whether `ip` may try the admin token now; counts nothing.
    pub async fn admin_allowed(&self, ip: IpAddr, now: DateTime<Utc>) -> Result<(), ApiError> {
        let wait = self.attempts.wait(&[self.admin_cell(ip)], now).await?;
        match wait.is_zero() {
            true => Ok(()),
            false => Err(refused("admin", wait)),
        }
    }

    /// Counts a failed admin-token authentication from `ip`; past the limit the answer is
    /// `429` instead of `401`.
    pub async fn admin_failed(&self, ip: IpAddr, now: DateTime<Utc>) -> Result<(), ApiError> {
        self.attempts
            .take(&[self.admin_cell(ip)], now)
            .await?
            .map_err(|wait| refused("admin", wait))
    }

    /// Deletes the cells back at fresh.
    pub async fn housekeep(&self, now: DateTime<Utc>) -> Result<u64, sqlx::Error> {
        self.attempts.housekeep(now).await
    }

    fn admin_cell(&self, ip: IpAddr) -> Cell {
        Cell::new(
            format!("admin:ip:{}", attempts::address(ip)),
            self.admin_failures,
        )
    }
}
