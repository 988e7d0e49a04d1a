//! What one accounting transaction adds to the per-key counters (SPEC §13):
//! `key_usage_counter`, which `GET /account/v1/keys` reads as `used`, and the units of
//! limited keys that move from reserved by a replica (`key_quota_reservation`, see
//! `usage::key_limits`) to accounted.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::event::UsageEvent;
use super::ledger_sql::bump_key_counters;
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
        let (calls, units) = per_key.entry((e.key_id, month)).or_default();
        *calls += 1;
        *units += e.cost;
        if let Some(replica) = e.key_reserved_by {
            *reserved.entry((e.key_id, month, replica)).or_default() += e.cost;
        }
    }
    bump_key_counters(&mut *conn, &per_key).await?;
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
