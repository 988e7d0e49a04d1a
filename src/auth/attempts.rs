//! Attempt limits shared by the whole fleet (SPEC §2 `account.*`, §21), kept in
//! PostgreSQL's `attempt_limit` (migration V17).
//!
//! A limit of `n` an hour is a GCRA cell per subject: `tat` is the instant the subject's
//! bucket is empty again, each counted attempt moves it `3600 / n` seconds on, and one more
//! attempt fits while `tat <= now + (n - 1) * interval` (a burst of `n`, then one every
//! interval). Every replica reads and moves the same row in one statement, so a limit
//! holds fleet-wide: [`Attempts::take`] counts an attempt only if it fits, atomically, and
//! a success gives its attempt back ([`Attempts::refund`]). Attempts that are counted only
//! once they have failed ([`Attempts::count`]) are judged before they are tried
//! ([`Attempts::wait`]) and may overshoot by the attempts in flight.
//!
//! Subjects are strings built by the callers (`"login:ip:192.0.2.1"`); personal ones
//! (emails) are hashed before they get here. Time is a parameter.

use std::net::IpAddr;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use super::limits::client_key;

/// `per_hour` attempts of one kind per subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    per_hour: u32,
}

impl Limit {
    /// A limit of `per_hour` attempts an hour (0 counts as 1).
    pub fn per_hour(per_hour: u32) -> Self {
        Self {
            per_hour: per_hour.max(1),
        }
    }

    /// How far one attempt moves the cell.
    fn interval(self) -> TimeDelta {
        TimeDelta::microseconds(3_600_000_000 / i64::from(self.per_hour))
    }

    /// How far ahead of now the cell may stand for one more attempt to fit.
    fn tolerance(self) -> TimeDelta {
        self.interval() * (self.per_hour as i32 - 1)
    }

    /// How long until one more attempt fits a cell standing at `tat`; zero if it fits now.
    pub fn wait(self, tat: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Duration {
        let Some(tat) = tat else {
            return Duration::ZERO;
        };
        (tat - now - self.tolerance())
            .to_std()
            .unwrap_or(Duration::ZERO)
    }
}

/// A span as whole microseconds, as the statements take it.
fn micros(span: TimeDelta) -> i64 {
    span.num_microseconds().unwrap_or(i64::MAX)
}

/// One subject of one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub key: String,
    pub limit: Limit,
}

impl Cell {
    pub fn new(key: String, limit: Limit) -> Self {
        Self { key, limit }
    }
}

/// The subject text of a client address: IPv4 as is, IPv6 by its /64.
pub fn address(ip: IpAddr) -> String {
    client_key(ip).to_string()
}

/// The subject text of an email: the hex SHA-256 of its trimmed, lowercased form, so no
/// address is stored in clear.
pub fn email(email: &str) -> String {
    let digest = Sha256::digest(email.trim().to_lowercase().as_bytes());
    hex::encode(&digest[..16])
}

/// The fleet's attempt cells.
#[derive(Clone)]
pub struct Attempts {
    db: PgPool,
}

impl Attempts {
    pub fn new(db: PgPool) -> Self {
        Self { db }
    }

    /// How long until one more attempt fits every cell; zero when it fits now. Counts
    /// nothing.
    pub async fn wait(&self, cells: &[Cell], now: DateTime<Utc>) -> Result<Duration, sqlx::Error> {
        let keys: Vec<&str> = cells.iter().map(|c| c.key.as_str()).collect();
        let rows: Vec<(String, DateTime<Utc>)> = sqlx::query!(
            "SELECT key, tat FROM attempt_limit WHERE key = ANY($1)",
            &keys as &[&str],
        )
        .fetch_all(&self.db)
        .await?
        .into_iter()
        .map(|row| (row.key, row.tat))
        .collect();
        Ok(cells
            .iter()
            .map(|cell| {
                let tat = rows.iter().find(|(k, _)| *k == cell.key).map(|(_, t)| *t);
                cell.limit.wait(tat, now)
            })
            .max()
            .unwrap_or(Duration::ZERO))
    }

    /// Counts one attempt on every cell if it fits all of them; otherwise counts nothing
    /// and says how long until it would fit.
    pub async fn take(
        &self,
        cells: &[Cell],
        now: DateTime<Utc>,
    ) -> Result<Result<(), Duration>, sqlx::Error> {
        for (taken, cell) in cells.iter().enumerate() {
            let moved = sqlx::query_scalar!(
                "INSERT INTO attempt_limit AS a (key, tat)
                 VALUES ($1, $2::timestamptz + $3::bigint * interval '1 microsecond')
                 ON CONFLICT (key) DO UPDATE
                 SET tat = greatest(a.tat, $2) + $3::bigint * interval '1 microsecond'
                 WHERE a.tat <= $2 + $4::bigint * interval '1 microsecond'
                 RETURNING tat",
                cell.key,
                now,
                micros(cell.limit.interval()),
                micros(cell.limit.tolerance()),
            )
            .fetch_optional(&self.db)
            .await?;
            if moved.is_none() {
                self.refund(&cells[..taken], now).await?;
                let wait = self.wait(std::slice::from_ref(cell), now).await?;
                // The cell fell back under its limit between the two statements.
                return Ok(Err(wait.max(Duration::from_secs(1))));
            }
        }
        Ok(Ok(()))
    }

    /// Counts one attempt on every cell, fitting or not; a cell never stands more than
    /// one interval past its limit, so a refused subject waits one interval at most.
    pub async fn count(&self, cells: &[Cell], now: DateTime<Utc>) -> Result<(), sqlx::Error> {
        for cell in cells {
            let interval = cell.limit.interval();
            sqlx::query!(
                "INSERT INTO attempt_limit AS a (key, tat)
                 VALUES ($1, $2::timestamptz + $3::bigint * interval '1 microsecond')
                 ON CONFLICT (key) DO UPDATE
                 SET tat = least(greatest(a.tat, $2) + $3::bigint * interval '1 microsecond',
                                 $2 + $4::bigint * interval '1 microsecond')",
                cell.key,
                now,
                micros(interval),
                micros(cell.limit.tolerance() + interval),
            )
            .execute(&self.db)
            .await?;
        }
        Ok(())
    }

    /// Gives back one attempt [`take`](Self::take) counted on each cell (a success).
    pub async fn refund(&self, cells: &[Cell], now: DateTime<Utc>) -> Result<(), sqlx::Error> {
        for cell in cells {
            sqlx::query!(
                "UPDATE attempt_limit
                 SET tat = greatest(tat - $2::bigint * interval '1 microsecond', $3)
                 WHERE key = $1",
                cell.key,
                micros(cell.limit.interval()),
                now,
            )
            .execute(&self.db)
            .await?;
        }
        Ok(())
    }

    /// Deletes the cells back at fresh (their `tat` past); returns how many.
    pub async fn housekeep(&self, now: DateTime<Utc>) -> Result<u64, sqlx::Error> {
        let done = sqlx::query!("DELETE FROM attempt_limit WHERE tat < $1", now)
            .execute(&self.db)
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn ten_an_hour_is_a_burst_of_ten_then_one_every_six_minutes() {
        let limit = Limit::per_hour(10);
        assert_eq!(limit.interval(), TimeDelta::seconds(360));
        assert_eq!(limit.wait(None, at(0)), Duration::ZERO);
        // Ten attempts at once put the cell an hour ahead: the eleventh waits 360 s.
        assert_eq!(limit.wait(Some(at(3600)), at(0)), Duration::from_secs(360));
        assert_eq!(limit.wait(Some(at(3600)), at(359)), Duration::from_secs(1));
        assert_eq!(limit.wait(Some(at(3600)), at(360)), Duration::ZERO);
        // Nine leave room for a tenth.
        assert_eq!(limit.wait(Some(at(3240)), at(0)), Duration::ZERO);
    }

    #[test]
    fn a_limit_of_zero_counts_as_one() {
        let limit = Limit::per_hour(0);
        assert_eq!(limit.tolerance(), TimeDelta::zero());
        assert_eq!(limit.wait(Some(at(3600)), at(0)), Duration::from_secs(3600));
    }

    #[test]
    fn emails_are_hashed_after_trimming_and_lowercasing() {
        assert_eq!(email(" Ann@Example.com "), email("ann@example.com"));
        assert_ne!(email("ann@example.com"), email("bob@example.com"));
        assert!(!email("ann@example.com").contains("ann"));
        assert_eq!(email("ann@example.com").len(), 32);
    }
}
