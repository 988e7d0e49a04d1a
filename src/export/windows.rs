//! Export windows in PostgreSQL (`meter_window`, `meter_cursor`, V15): opening them,
//! finding the due ones, recording each attempt's outcome, listing an account's.
//!
//! An account's units are counted over its whole life (the sum of its
//! `usage_counter.used`), a figure the ledger grows in the transaction that records the
//! rows, whatever month they belong to. A window is `[cursor, that sum now)`: its
//! identifier and figures are fixed when it is written, before any attempt. The cursor
//! moves to the window's end only when Stripe accepted it; a refused window leaves the
//! cursor where it was, so its units go out again in the account's next window.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// Most accounts looked at, or windows attempted, per round.
pub const ROUND: i64 = 500;

/// One window to send.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Due {
    pub id: i64,
    pub account_id: i64,
    pub identifier: String,
    pub customer: String,
    pub units_from: i64,
    pub units_to: i64,
    pub to_at: DateTime<Utc>,
    pub attempts: i32,
}

impl Due {
    pub fn value(&self) -> i64 {
        self.units_to - self.units_from
    }
}

/// One window as the admin list shows it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Listed {
    pub identifier: String,
    pub customer: String,
    pub from_at: DateTime<Utc>,
    pub to_at: DateTime<Utc>,
    pub units_from: i64,
    pub units_to: i64,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Opens a window for every account whose turn has come (not looked at for
/// `interval_s`), that has no window open and has units beyond its cursor; the window
/// goes to the account's newest Stripe customer. Returns how many were opened.
pub async fn open_due(db: &PgPool, interval_s: u64) -> Result<u64, sqlx::Error> {
    let opened = sqlx::query(
        "WITH due AS (
             UPDATE meter_cursor c SET checked_at = now()
             WHERE c.account_id IN (
                     SELECT account_id FROM meter_cursor
                     WHERE (checked_at IS NULL
                            OR checked_at <= now() - make_interval(secs => $1))
                       AND NOT EXISTS (SELECT 1 FROM meter_window w
                                       WHERE w.account_id = meter_cursor.account_id
                                         AND w.status = 'pending')
                     ORDER BY checked_at NULLS FIRST
                     LIMIT $2
                     FOR UPDATE SKIP LOCKED)
             RETURNING c.account_id, c.exported_units, c.exported_at)
         INSERT INTO meter_window (account_id, identifier, customer, units_from, units_to,
                                   from_at, to_at, next_attempt_at)
         SELECT d.account_id, 'tollgate:' || d.account_id || ':' || gen_random_uuid(),
                k.customer, d.exported_units, t.units, d.exported_at, now(), now()
         FROM due d
         JOIN LATERAL (SELECT customer FROM stripe_customer s
                       WHERE s.account_id = d.account_id
                       ORDER BY s.created_at DESC, s.customer DESC LIMIT 1) k ON true
         JOIN LATERAL (SELECT coalesce(sum(used), 0)::bigint AS units FROM usage_counter u
                       WHERE u.account_id = d.account_id) t ON true
         WHERE t.units > d.exported_units
         ON CONFLICT (account_id) WHERE status = 'pending' DO NOTHING",
    )
    .bind(interval_s as f64)
    .bind(ROUND)
    .execute(db)
    .await?;
    Ok(opened.rows_affected())
}

/// Windows whose next attempt is due, oldest first.
pub async fn due(db: &PgPool, limit: i64) -> Result<Vec<Due>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, account_id, identifier, customer, units_from, units_to, to_at, attempts
         FROM meter_window
         WHERE status = 'pending' AND next_attempt_at <= now()
         ORDER BY next_attempt_at, id
         LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Stripe accepted the window: it is sent, and the account's cursor moves to its end
/// (only from its start: a window re-sent by hand after the cursor moved on leaves it).
pub async fn accepted(db: &PgPool, window: &Due) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH sent AS (
             UPDATE meter_window
             SET status = 'sent', attempts = attempts + 1, finished_at = now(),
                 last_error = NULL
             WHERE id = $1 AND status = 'pending'
             RETURNING account_id, units_from, units_to, to_at)
         UPDATE meter_cursor c SET exported_units = s.units_to, exported_at = s.to_at
         FROM sent s
         WHERE c.account_id = s.account_id AND c.exported_units = s.units_from",
    )
    .bind(window.id)
    .execute(db)
    .await?;
    Ok(())
}

/// The attempt failed in a way worth retrying: the next one waits `wait_s` seconds.
pub async fn retry_later(
    db: &PgPool,
    window: &Due,
    wait_s: f64,
    reason: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE meter_window
         SET attempts = attempts + 1, last_error = $2,
             next_attempt_at = now() + make_interval(secs => $3)
         WHERE id = $1 AND status = 'pending'",
    )
    .bind(window.id)
    .bind(reason)
    .bind(wait_s)
    .execute(db)
    .await?;
    Ok(())
}

/// Stripe refused the window: it is failed with Stripe's message; the cursor stays.
pub async fn refused(db: &PgPool, window: &Due, message: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE meter_window
         SET status = 'failed', attempts = attempts + 1, last_error = $2, finished_at = now()
         WHERE id = $1 AND status = 'pending'",
    )
    .bind(window.id)
    .bind(message)
    .execute(db)
    .await?;
    Ok(())
}

/// Seconds since the start of the oldest units not yet accepted by Stripe (0 when every
/// open window is empty of such): the oldest open window's `from`.
pub async fn oldest_unexported_age(db: &PgPool) -> Result<f64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT coalesce(extract(epoch FROM now() - min(from_at)), 0)::float8
         FROM meter_window WHERE status = 'pending'",
    )
    .fetch_one(db)
    .await
}

/// An account's newest `limit` windows, newest first.
pub async fn list(
    conn: &mut sqlx::PgConnection,
    account_id: i64,
    limit: i64,
) -> Result<Vec<Listed>, sqlx::Error> {
    sqlx::query_as(
        "SELECT identifier, customer, from_at, to_at, units_from, units_to, status, attempts,
                last_error, finished_at
         FROM meter_window WHERE account_id = $1
         ORDER BY id DESC LIMIT $2",
    )
    .bind(account_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}
