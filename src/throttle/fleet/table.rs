//! `fleet_marker`: the fleet's exhaustion markers in PostgreSQL (migration V10).
//!
//! A process writes a row right after its own KV write or delete succeeded (a delete's
//! tombstone even before: the account has units again whatever KV says), and the lister
//! makes the rows follow what KV lists. Every change is notified by a trigger, which is
//! how every replica's view follows the fleet within a second.
//!
//! KV listings may lag writes and deletes by up to a minute, so a listing never undoes a
//! row changed less than [`LISTING_LAG`] before it started: a marker written just now
//! stays although the listing misses it, a marker deleted just now (a tombstone) stays
//! deleted although the listing still shows it.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::MarkerKind;

/// How far a KV listing may lag the writes and deletes before it.
pub const LISTING_LAG: Duration = Duration::from_secs(90);
/// How long tombstones are kept for operators to read, well past [`LISTING_LAG`].
const TOMBSTONE_TTL: Duration = Duration::from_secs(3_600);

/// Whether the fleet holds `account`'s marker of the period.
pub async fn is_marked(
    db: &PgPool,
    kind: MarkerKind,
    period_start_unix: i64,
    account_id: i64,
) -> Result<bool, sqlx::Error> {
    Ok(marked_among(db, kind, period_start_unix, &[account_id])
        .await?
        .contains(&account_id))
}

/// Which of `accounts` the fleet holds a marker of the period for.
pub async fn marked_among(
    db: &PgPool,
    kind: MarkerKind,
    period_start_unix: i64,
    accounts: &[i64],
) -> Result<HashSet<i64>, sqlx::Error> {
    let rows: Vec<i64> = sqlx::query_scalar(
        "SELECT account_id FROM fleet_marker
          WHERE kind = $1 AND period_start_unix = $2 AND account_id = ANY($3) AND marked",
    )
    .bind(kind.as_str())
    .bind(period_start_unix)
    .bind(accounts)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Records markers written (`marked`) or removed (a tombstone) by this process.
pub async fn set(
    db: &PgPool,
    kind: MarkerKind,
    period_start_unix: i64,
    accounts: &[i64],
    marked: bool,
    by: &str,
) -> Result<(), sqlx::Error> {
    if accounts.is_empty() {
        return Ok(());
    }
    sqlx::query(
        r#"
        INSERT INTO fleet_marker (kind, period_start_unix, account_id, marked, changed_by)
        SELECT $1, $2, a, $4, $5 FROM unnest($3::bigint[]) AS a
        ON CONFLICT (kind, period_start_unix, account_id) DO UPDATE
           SET marked = EXCLUDED.marked, changed_at = now(), changed_by = EXCLUDED.changed_by
        "#,
    )
    .bind(kind.as_str())
    .bind(period_start_unix)
    .bind(accounts)
    .bind(marked)
    .bind(by)
    .execute(db)
    .await?;
    Ok(())
}

/// The fleet's markers of one month and one day, and how long ago the last good listing
/// was, with the listing interval then planned.
#[derive(Debug, Default)]
pub struct Loaded {
    pub month: HashSet<i64>,
    pub day: HashSet<i64>,
    pub listed_ago: Option<Duration>,
    pub interval: Duration,
}

/// Reads the markers of the month and day starting at the given instants.
pub async fn load(
    db: &PgPool,
    month_start_unix: i64,
    day_start_unix: i64,
) -> Result<Loaded, sqlx::Error> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT kind, account_id FROM fleet_marker
          WHERE marked AND ((kind = 'month' AND period_start_unix = $1)
                         OR (kind = 'day' AND period_start_unix = $2))",
    )
    .bind(month_start_unix)
    .bind(day_start_unix)
    .fetch_all(db)
    .await?;
    let mut loaded = Loaded::default();
    for (kind, account_id) in rows {
        match MarkerKind::parse(&kind) {
            Some(MarkerKind::Month) => loaded.month.insert(account_id),
            Some(MarkerKind::Day) => loaded.day.insert(account_id),
            None => false,
        };
    }
    let lister: Option<(Option<f64>, i64)> = sqlx::query_as(
        "SELECT extract(epoch FROM now() - last_listed_at)::float8, interval_ms FROM fleet_lister",
    )
    .fetch_optional(db)
    .await?;
    if let Some((ago, interval_ms)) = lister {
        loaded.listed_ago = ago.map(|s| Duration::from_secs_f64(s.max(0.0)));
        loaded.interval = Duration::from_millis(u64::try_from(interval_ms).unwrap_or(0));
    }
    Ok(loaded)
}

/// What one listing found: the accounts marked in KV for one period.
#[derive(Debug)]
pub struct Listed {
    pub kind: MarkerKind,
    pub period_start_unix: i64,
    pub accounts: Vec<i64>,
}

/// Makes the rows of a listed period follow a KV listing that started at `started`
/// (the database's clock), except rows changed within [`LISTING_LAG`] before it. Only
/// the differences are written, so a listing that finds what the table holds changes
/// nothing and notifies no one.
pub async fn follow_listing(
    conn: &mut PgConnection,
    listed: &Listed,
    started: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    let settled_before = started - chrono::Duration::from_std(LISTING_LAG).unwrap_or_default();
    let rows: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT account_id, marked FROM fleet_marker WHERE kind = $1 AND period_start_unix = $2",
    )
    .bind(listed.kind.as_str())
    .bind(listed.period_start_unix)
    .fetch_all(&mut *conn)
    .await?;
    let held: std::collections::HashMap<i64, bool> = rows.into_iter().collect();
    let in_kv: HashSet<i64> = listed.accounts.iter().copied().collect();
    let appeared: Vec<i64> = in_kv
        .iter()
        .filter(|a| held.get(a) != Some(&true))
        .copied()
        .collect();
    let vanished: Vec<i64> = held
        .iter()
        .filter(|(a, marked)| **marked && !in_kv.contains(a))
        .map(|(a, _)| *a)
        .collect();
    // Listed markers the fleet does not hold, unless it removed them just now. The
    // conditions are checked again in SQL: a replica may have changed a row since.
    if !appeared.is_empty() {
        sqlx::query(
            r#"
            INSERT INTO fleet_marker (kind, period_start_unix, account_id, marked, changed_by)
            SELECT $1, $2, a, true, 'listing' FROM unnest($3::bigint[]) AS a
            ON CONFLICT (kind, period_start_unix, account_id) DO UPDATE
               SET marked = true, changed_at = now(), changed_by = 'listing'
             WHERE NOT fleet_marker.marked AND fleet_marker.changed_at < $4
            "#,
        )
        .bind(listed.kind.as_str())
        .bind(listed.period_start_unix)
        .bind(&appeared)
        .bind(settled_before)
        .execute(&mut *conn)
        .await?;
    }
    // Markers KV no longer holds (expired, deleted outside the fleet), unless written
    // just now.
    if !vanished.is_empty() {
        sqlx::query(
            r#"
            UPDATE fleet_marker SET marked = false, changed_at = now(), changed_by = 'listing'
             WHERE kind = $1 AND period_start_unix = $2 AND account_id = ANY($3)
               AND marked AND changed_at < $4
            "#,
        )
        .bind(listed.kind.as_str())
        .bind(listed.period_start_unix)
        .bind(&vanished)
        .bind(settled_before)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Deletes rows of past months and days, and old tombstones.
pub async fn forget_old(
    conn: &mut PgConnection,
    month_start_unix: i64,
    day_start_unix: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        r#"
        DELETE FROM fleet_marker
         WHERE (kind = 'month' AND period_start_unix < $1)
            OR (kind = 'day' AND period_start_unix < $2)
            OR (NOT marked AND changed_at < now() - make_interval(secs => $3))
        "#,
    )
    .bind(month_start_unix)
    .bind(day_start_unix)
    .bind(TOMBSTONE_TTL.as_secs_f64())
    .execute(conn)
    .await?;
    Ok(())
}
