//! What one accounting transaction adds to the per-key counters (SPEC §13):
//! `key_usage_counter`, which `GET /account/v1/keys` reads as `used`, and the units of
//! limited keys that move from reserved by a replica (`key_quota_reservation`, see
//! `quota::key_limits`) to accounted.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::event::UsageEvent;
use crate::month::Month;

/// Adds the ledger rows just inserted to the per-key monthly counters, and moves the
/// units of limited keys from "reserved by a replica" to "accounted". Rows of a key id
/// that does not exist (an event delivered by hand) count for no key.
pub(super) async fn record_keys(
    conn: &mut sqlx::PgConnection,
    accounted: &[&UsageEvent],
) -> Result<(), sqlx::Error> {
    if accounted.is_empty() {
        return Ok(());
    }
    let mut per_key: BTreeMap<(i64, Month), (i64, i64)> = BTreeMap::new();
    let mut reserved: BTreeMap<(i64, Month, Uuid), i64> = BTreeMap::new();
    for e in accounted {
        let month = Month::containing(e.occurred_at);
        let counter = per_key.entry((e.key_id, month)).or_default();
        counter.0 += e.cost;
        counter.1 += 1;
        if let Some(replica) = e.key_reserved_by {
            *reserved.entry((e.key_id, month, replica)).or_default() += e.cost;
        }
    }
    let keys: Vec<i64> = per_key.keys().map(|(k, _)| *k).collect();
    let months: Vec<DateTime<Utc>> = per_key.keys().map(|(_, m)| m.start()).collect();
    let used: Vec<i64> = per_key.values().map(|(u, _)| *u).collect();
    let calls: Vec<i64> = per_key.values().map(|(_, c)| *c).collect();
    sqlx::query(
        "INSERT INTO key_usage_counter (key_id, month_start, used, calls)
         SELECT u.key_id, u.month_start, u.used, u.calls
         FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[], $4::bigint[])
              AS u(key_id, month_start, used, calls)
         JOIN api_key k ON k.id = u.key_id
         ON CONFLICT (key_id, month_start) DO UPDATE
             SET used = key_usage_counter.used + EXCLUDED.used,
                 calls = key_usage_counter.calls + EXCLUDED.calls",
    )
    .bind(keys)
    .bind(months)
    .bind(used)
    .bind(calls)
    .execute(&mut *conn)
    .await?;
    if reserved.is_empty() {
        return Ok(());
    }
    let keys: Vec<i64> = reserved.keys().map(|(k, _, _)| *k).collect();
    let months: Vec<DateTime<Utc>> = reserved.keys().map(|(_, m, _)| m.start()).collect();
    let replicas: Vec<Uuid> = reserved.keys().map(|(_, _, r)| *r).collect();
    let units: Vec<i64> = reserved.values().copied().collect();
    sqlx::query(
        "UPDATE key_quota_reservation r SET accounted = r.accounted + u.units
         FROM UNNEST($1::bigint[], $2::timestamptz[], $3::uuid[], $4::bigint[])
             AS u(key_id, month_start, replica, units)
         WHERE r.key_id = u.key_id AND r.month_start = u.month_start AND r.replica = u.replica",
    )
    .bind(keys)
    .bind(months)
    .bind(replicas)
    .bind(units)
    .execute(conn)
    .await?;
    Ok(())
}
