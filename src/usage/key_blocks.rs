//! The statements of per-key limits (SPEC §13): reserving, renewing and returning a
//! replica's block of a limited key (`key_quota_reservation`, see `key_limits.rs`)
//! (what accounting adds to the per-key counters is `accounting::key_counters`).

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::spending::reservation_block;
use crate::month::Month;

/// How long a reservation lasts unless renewed.
pub(super) const LEASE: Duration = Duration::from_secs(60);

/// What a reservation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reserved {
    pub limit: i64,
    /// Units reserved (the call's cost included); 0 = refused.
    pub block: i64,
    /// Nothing is left even counting what other replicas hold.
    pub used_up: bool,
}

/// Reserves a block of `key_id`'s units of `month` for `replica`, for a call of `cost`,
/// under the key's row lock (so reservations of one key take turns across replicas).
/// `None` when the key has no limit (or no longer exists).
pub(super) async fn reserve_block(
    conn: &mut sqlx::PgConnection,
    key_id: i64,
    month: Month,
    replica: Uuid,
    cost: i64,
) -> Result<Option<Reserved>, sqlx::Error> {
    let limit: Option<Option<i64>> =
        sqlx::query_scalar("SELECT monthly_limit FROM api_key WHERE id = $1 FOR NO KEY UPDATE")
            .bind(key_id)
            .fetch_optional(&mut *conn)
            .await?;
    let Some(limit) = limit.flatten() else {
        return Ok(None);
    };
    // One statement, one snapshot: accounting moves units from "outstanding" to "used"
    // in one transaction, so the two figures never miss or double a unit.
    let (used, outstanding): (i64, i64) = sqlx::query_as(
        "SELECT coalesce((SELECT sum(units) FROM usage_rollup
                          WHERE key_id = $1 AND day >= $3 AND day < $4), 0)::bigint,
                coalesce((SELECT sum(greatest(granted - accounted, 0)) FROM key_quota_reservation
                          WHERE key_id = $1 AND month_start = $2 AND expires_at > now()), 0)::bigint",
    )
    .bind(key_id)
    .bind(month.start())
    .bind(month.start().date_naive())
    .bind(month.end().date_naive())
    .fetch_one(&mut *conn)
    .await?;
    let block = reservation_block(limit - used - outstanding, cost);
    if block > 0 {
        sqlx::query(
            "INSERT INTO key_quota_reservation (key_id, month_start, replica, granted, expires_at)
             VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
             ON CONFLICT (key_id, month_start, replica) DO UPDATE
                 SET granted = key_quota_reservation.granted + EXCLUDED.granted,
                     expires_at = EXCLUDED.expires_at",
        )
        .bind(key_id)
        .bind(month.start())
        .bind(replica)
        .bind(block)
        .bind(LEASE.as_secs_f64())
        .execute(&mut *conn)
        .await?;
    }
    Ok(Some(Reserved {
        limit,
        block,
        used_up: reservation_block(limit - used, cost) == 0,
    }))
}

/// Hands `units` of this replica's reservation of the key's `month` back.
pub(super) async fn give_back(
    conn: &mut sqlx::PgConnection,
    key_id: i64,
    month: Month,
    replica: Uuid,
    units: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE key_quota_reservation SET granted = greatest(granted - $4, accounted)
         WHERE key_id = $1 AND month_start = $2 AND replica = $3",
    )
    .bind(key_id)
    .bind(month.start())
    .bind(replica)
    .bind(units)
    .execute(conn)
    .await?;
    Ok(())
}

/// Renews this replica's reservations of `key_ids`.
pub(super) async fn renew(db: &PgPool, key_ids: &[i64], replica: Uuid) -> Result<(), sqlx::Error> {
    if key_ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE key_quota_reservation SET expires_at = now() + make_interval(secs => $3)
         WHERE key_id = ANY($1) AND replica = $2",
    )
    .bind(key_ids)
    .bind(replica)
    .bind(LEASE.as_secs_f64())
    .execute(db)
    .await?;
    Ok(())
}
