//! `notification_outbox` (migration V11): threshold events, written by the accounting
//! transaction that crossed them and read by the one delivering process.
//!
//! Writing is [`record`], inside the caller's transaction, one statement for a whole
//! batch; the unique `(account_id, month_start, threshold)` makes a second crossing of
//! the same threshold in the same month (a redelivery, another replica, a downgrade and
//! upgrade) change nothing. Everything else is delivery's: the due head of each
//! account, and the outcome of each attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// The event `type` of a threshold crossing.
pub const EVENT_TYPE: &str = "usage.threshold";

/// Longest `last_error` kept, in characters.
const MAX_ERROR_CHARS: usize = 500;

/// A threshold crossed by an accounting transaction, to be recorded with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub account_id: i64,
    pub month_start: DateTime<Utc>,
    pub threshold: u8,
    /// `used` right after the crossing call.
    pub used: i64,
    /// The month's allowance, credits excluded.
    pub allowance: i64,
    /// The crossing call's time.
    pub occurred_at: DateTime<Utc>,
}

/// Records `events` in the caller's transaction; returns how many were new (the others
/// had been recorded before, by this process or another).
pub async fn record(conn: &mut PgConnection, events: &[NewEvent]) -> Result<u64, sqlx::Error> {
    if events.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = events.iter().map(|_| Uuid::new_v4()).collect();
    let accounts: Vec<i64> = events.iter().map(|e| e.account_id).collect();
    let months: Vec<DateTime<Utc>> = events.iter().map(|e| e.month_start).collect();
    let thresholds: Vec<i16> = events.iter().map(|e| i16::from(e.threshold)).collect();
    let used: Vec<i64> = events.iter().map(|e| e.used).collect();
    let allowances: Vec<i64> = events.iter().map(|e| e.allowance).collect();
    let times: Vec<DateTime<Utc>> = events.iter().map(|e| e.occurred_at).collect();
    let done = sqlx::query(
        "INSERT INTO notification_outbox
             (id, account_id, month_start, threshold, used, allowance, occurred_at)
         SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::timestamptz[], $4::smallint[],
                              $5::bigint[], $6::bigint[], $7::timestamptz[])
         ON CONFLICT (account_id, month_start, threshold) DO NOTHING",
    )
    .bind(ids)
    .bind(accounts)
    .bind(months)
    .bind(thresholds)
    .bind(used)
    .bind(allowances)
    .bind(times)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// A pending event, as delivery reads it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Pending {
    pub id: Uuid,
    pub account_id: i64,
    pub month_start: DateTime<Utc>,
    pub threshold: i16,
    pub used: i64,
    pub allowance: i64,
    pub occurred_at: DateTime<Utc>,
    pub recorded_at: DateTime<Utc>,
    /// Attempts made before this one.
    pub attempts: i32,
    /// The database's clock when the row was read.
    pub db_now: DateTime<Utc>,
}

/// The JSON body of SPEC §7, field for field.
#[derive(Debug, Serialize)]
struct Payload<'a> {
    id: Uuid,
    #[serde(rename = "type")]
    kind: &'a str,
    account_id: i64,
    month_start: DateTime<Utc>,
    threshold: i16,
    used: i64,
    allowance: i64,
    occurred_at: DateTime<Utc>,
}

impl Pending {
    /// The request body: the same bytes on every attempt.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&Payload {
            id: self.id,
            kind: EVENT_TYPE,
            account_id: self.account_id,
            month_start: self.month_start,
            threshold: self.threshold,
            used: self.used,
            allowance: self.allowance,
            occurred_at: self.occurred_at,
        })
        .expect("the payload serializes")
    }

    /// How long ago the event was recorded, by the database's clock.
    pub fn age(&self) -> Duration {
        (self.db_now - self.recorded_at)
            .to_std()
            .unwrap_or_default()
    }
}

/// The due head of up to `limit` accounts: each account's oldest pending event (by the
/// crossing call's time, then threshold), when its next attempt is due. An account whose
/// head waits for a retry has nothing due: its later events wait behind it.
pub async fn due_heads(db: &PgPool, limit: i64) -> Result<Vec<Pending>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, account_id, month_start, threshold, used, allowance, occurred_at,
                recorded_at, attempts, now() AS db_now
           FROM (SELECT DISTINCT ON (account_id) *
                   FROM notification_outbox
                  WHERE delivered_at IS NULL AND failed_at IS NULL
                  ORDER BY account_id, occurred_at, threshold, id) AS head
          WHERE next_attempt_at <= now()
          ORDER BY next_attempt_at, account_id
          LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The receiver took the event.
pub async fn delivered(db: &PgPool, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE notification_outbox
            SET delivered_at = now(), attempts = attempts + 1, last_error = NULL
          WHERE id = $1 AND delivered_at IS NULL AND failed_at IS NULL",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(())
}

/// An attempt failed with `error`; the next one is due `retry_in` from now.
pub async fn retry_later(
    db: &PgPool,
    id: Uuid,
    error: &str,
    retry_in: Duration,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE notification_outbox
            SET attempts = attempts + 1, last_error = $2,
                next_attempt_at = now() + make_interval(secs => $3)
          WHERE id = $1 AND delivered_at IS NULL AND failed_at IS NULL",
    )
    .bind(id)
    .bind(truncate(error))
    .bind(retry_in.as_secs_f64())
    .execute(db)
    .await?;
    Ok(())
}

/// The last attempt failed with `error` and the retry window is over.
pub async fn give_up(db: &PgPool, id: Uuid, error: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE notification_outbox
            SET attempts = attempts + 1, last_error = $2, failed_at = now()
          WHERE id = $1 AND delivered_at IS NULL AND failed_at IS NULL",
    )
    .bind(id)
    .bind(truncate(error))
    .execute(db)
    .await?;
    Ok(())
}

/// Pending events and the age of the oldest, in seconds.
pub async fn backlog(db: &PgPool) -> Result<(i64, f64), sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*),
                coalesce(extract(epoch FROM now() - min(recorded_at))::float8, 0)
           FROM notification_outbox
          WHERE delivered_at IS NULL AND failed_at IS NULL",
    )
    .fetch_one(db)
    .await
}

/// Deletes delivered and given-up events of months starting before `before`.
pub async fn prune(db: &PgPool, before: DateTime<Utc>) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "DELETE FROM notification_outbox
          WHERE month_start < $1 AND (delivered_at IS NOT NULL OR failed_at IS NOT NULL)",
    )
    .bind(before)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

fn truncate(error: &str) -> String {
    error.chars().take(MAX_ERROR_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_exactly_the_contracts_fields() {
        let event = Pending {
            id: "3f1c1e1e-0000-4000-8000-000000000001".parse().unwrap(),
            account_id: 42,
            month_start: "2026-11-01T00:00:00Z".parse().unwrap(),
            threshold: 80,
            used: 2_400,
            allowance: 3_000,
            occurred_at: "2026-11-20T12:34:56.789Z".parse().unwrap(),
            recorded_at: "2026-11-20T12:34:57Z".parse().unwrap(),
            attempts: 3,
            db_now: "2026-11-20T12:40:00Z".parse().unwrap(),
        };
        assert_eq!(
            String::from_utf8(event.body()).unwrap(),
            r#"{"id":"3f1c1e1e-0000-4000-8000-000000000001","type":"usage.threshold","account_id":42,"month_start":"2026-11-01T00:00:00Z","threshold":80,"used":2400,"allowance":3000,"occurred_at":"2026-11-20T12:34:56.789Z"}"#
        );
        assert_eq!(event.age(), Duration::from_secs(303));
    }
}
