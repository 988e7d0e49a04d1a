//! Which process lists KV, and how often.
//!
//! One row, `fleet_lister`, is the lease: its holder renews it on every worker tick, and
//! it lists KV only while it holds it. A stopped process gives the lease up at once; a
//! dead or stalled one stops renewing, the lease expires ([`lease_ttl`]) and the next
//! process to tick takes it over. Two listers can overlap only for a tick around a
//! takeover, and even then every call they make still needs a permit of the fleet's
//! budget, so the bound holds.
//!
//! The schedule is in the row too (`next_listing_at`), so a new lister keeps the old
//! one's pace. Listing takes ⌈markers/1000⌉ pages; [`listing_interval`] stretches the
//! interval so listings spend at most [`LISTING_SHARE_PERCENT`] of the budget, leaving
//! the rest for marker writes and deletes.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// Most of the call budget that listings may take; writes and deletes keep the rest.
pub const LISTING_SHARE_PERCENT: u32 = 50;
/// Keys per listing page (Cloudflare's largest).
pub const PAGE_SIZE: usize = 1_000;

/// How long a lease lives without renewal: three ticks, and never under 30 s, so a
/// lister that is merely busy (a listing of many pages, a burst of writes) keeps it.
pub fn lease_ttl(tick: Duration) -> Duration {
    (tick * 3).max(MIN_LEASE_TTL)
}

/// The shortest lease; a takeover after a lister dies waits out the rest of its lease.
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(30);

/// Pages one listing of `keys` keys costs (an empty listing is still one call).
pub fn pages(keys: usize) -> u32 {
    u32::try_from(keys.div_ceil(PAGE_SIZE).max(1)).unwrap_or(u32::MAX)
}

/// The interval between listings of `pages` pages that keeps them within
/// [`LISTING_SHARE_PERCENT`] of `budget` calls per `window`, and never shorter than
/// `floor` (`throttle.refresh_interval_ms`): `max(floor, pages × window / share)`.
pub fn listing_interval(pages: u32, budget: u32, window: Duration, floor: Duration) -> Duration {
    let share = u64::from(budget) * u64::from(LISTING_SHARE_PERCENT) / 100;
    if share == 0 {
        // Not one listing call per window to spare: list once per window at most.
        return window.max(floor);
    }
    let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    let stretched = window_ms
        .saturating_mul(u64::from(pages.max(1)))
        .div_ceil(share);
    Duration::from_millis(stretched).max(floor)
}

/// The lease, as this process holds it after a renewal.
#[derive(Debug, Clone)]
pub struct Lease {
    /// The database's clock at the renewal: listings compare against it.
    pub db_now: DateTime<Utc>,
    /// The next listing is due (within half a tick).
    pub due: bool,
    /// Pages the last listing took.
    pub pages: u32,
    /// The fleet holds daily markers today, so the daily prefix is listed too.
    pub daily_markers: bool,
}

/// Takes or renews the lease for `process`; `None` while another process holds it.
pub async fn renew(
    db: &PgPool,
    process: Uuid,
    ttl: Duration,
    tick: Duration,
    today_unix: i64,
) -> Result<Option<Lease>, sqlx::Error> {
    let row: Option<(DateTime<Utc>, bool, i32, bool)> = sqlx::query_as(
        r#"
        INSERT INTO fleet_lister (id, holder, expires_at)
        VALUES (true, $1, now() + make_interval(secs => $2))
        ON CONFLICT (id) DO UPDATE
           SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
         WHERE fleet_lister.holder = EXCLUDED.holder OR fleet_lister.expires_at <= now()
        RETURNING now(),
                  next_listing_at IS NULL
                      OR next_listing_at <= now() + make_interval(secs => $3),
                  listing_pages,
                  EXISTS (SELECT 1 FROM fleet_marker
                           WHERE kind = 'day' AND period_start_unix = $4 AND marked)
        "#,
    )
    .bind(process)
    .bind(ttl.as_secs_f64())
    .bind(tick.as_secs_f64() / 2.0)
    .bind(today_unix)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|(db_now, due, pages, daily_markers)| Lease {
        db_now,
        due,
        pages: u32::try_from(pages).unwrap_or(0),
        daily_markers,
    }))
}

/// Gives the lease up (on shutdown), so another process takes over at its next tick.
pub async fn release(db: &PgPool, process: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE fleet_lister SET expires_at = now() WHERE holder = $1")
        .bind(process)
        .execute(db)
        .await?;
    Ok(())
}

/// Records a good listing of `pages` pages that started at `started` (the database's
/// clock): the next one is due `interval` after that start, and every process hears
/// `listed:<interval_ms>` when the transaction commits.
pub async fn listed(
    conn: &mut PgConnection,
    process: Uuid,
    started: DateTime<Utc>,
    pages: u32,
    interval: Duration,
) -> Result<(), sqlx::Error> {
    let interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
    sqlx::query(
        r#"
        UPDATE fleet_lister
           SET last_listed_at = now(),
               next_listing_at = $2 + make_interval(secs => $3::float8 / 1000),
               listing_pages = $4, interval_ms = $3
         WHERE holder = $1
        "#,
    )
    .bind(process)
    .bind(started)
    .bind(interval_ms)
    .bind(i32::try_from(pages).unwrap_or(i32::MAX))
    .execute(&mut *conn)
    .await?;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(super::CHANNEL)
        .bind(format!("listed:{interval_ms}"))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Records a failed listing: try again `retry` from now.
pub async fn listing_failed(
    db: &PgPool,
    process: Uuid,
    retry: Duration,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE fleet_lister SET next_listing_at = now() + make_interval(secs => $2)
         WHERE holder = $1",
    )
    .bind(process)
    .bind(retry.as_secs_f64())
    .execute(db)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(300);
    const FLOOR: Duration = Duration::from_secs(10);

    #[test]
    fn pages_are_thousands_of_keys_rounded_up_and_never_zero() {
        assert_eq!(pages(0), 1);
        assert_eq!(pages(1), 1);
        assert_eq!(pages(1_000), 1);
        assert_eq!(pages(1_001), 2);
        assert_eq!(pages(10_000), 10);
    }

    #[test]
    fn few_markers_are_listed_every_refresh_interval() {
        // 1 page every 10 s = 30 calls per 5 minutes, far under half of 1,000.
        assert_eq!(listing_interval(1, 1_000, WINDOW, FLOOR), FLOOR);
        assert_eq!(listing_interval(10, 1_000, WINDOW, FLOOR), FLOOR);
    }

    #[test]
    fn many_markers_stretch_the_interval_to_half_the_budget() {
        // 100,000 markers: 100 pages; 500 calls per window allow 5 listings: one a minute.
        assert_eq!(
            listing_interval(100, 1_000, WINDOW, FLOOR),
            Duration::from_secs(60)
        );
        // 20 pages in a 6 s window with 120 calls (60 for listings): one listing per 2 s.
        assert_eq!(
            listing_interval(20, 120, Duration::from_secs(6), Duration::from_millis(200)),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn listings_never_take_more_than_their_share_of_any_window() {
        for pages in [1, 7, 19, 333, 5_000] {
            for budget in [3, 10, 120, 1_000] {
                let interval = listing_interval(pages, budget, WINDOW, Duration::ZERO);
                let listings = (WINDOW.as_millis() / interval.as_millis()) as u64;
                let share = u64::from(budget) * u64::from(LISTING_SHARE_PERCENT) / 100;
                if share > 0 {
                    assert!(
                        listings * u64::from(pages) <= share.max(u64::from(pages)),
                        "{pages} pages, budget {budget}: {listings} listings"
                    );
                }
            }
        }
    }

    #[test]
    fn a_budget_with_nothing_to_spare_lists_once_per_window() {
        assert_eq!(listing_interval(1, 1, WINDOW, FLOOR), WINDOW);
        assert_eq!(listing_interval(1, 0, WINDOW, FLOOR), WINDOW);
    }

    #[test]
    fn a_lease_outlives_a_busy_tick() {
        assert_eq!(lease_ttl(Duration::from_secs(60)), Duration::from_secs(180));
        assert_eq!(lease_ttl(Duration::from_millis(200)), MIN_LEASE_TTL);
    }
}
