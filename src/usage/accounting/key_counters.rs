//! The units of limited keys (SPEC §13) that move, as their calls are accounted, from
//! reserved by a replica (`key_quota_reservation`, see `usage::key_limits`) to
//! accounted. What each key used is the rollup's (`usage::analytics::rollup`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::event::UsageEvent;
use crate::month::Month;

/// Moves the units of limited keys that replicas forwarded on reservations from
/// "reserved" to "accounted".
pub(super) async fn settle_key_reservations(
    conn: &mut sqlx::PgConnection,
    accounted: &[&UsageEvent],
) -> Result<(), sqlx::Error> {
    let mut reserved: BTreeMap<(i64, Month, Uuid), i64> = BTreeMap::new();
    for e in accounted {
        if let Some(replica) = e.key_reserved_by {
            let month = Month::containing(e.occurred_at);
            *reserved.entry((e.key_id, month, replica)).or_default() += e.cost;
        }
    }
    if reserved.is_empty() {
        return Ok(());
    }
    let keys: Vec<i64> = reserved.keys().map(|(k, _, _)| *k).collect();
    let months: Vec<DateTime<Utc>> = reserved.keys().map(|(_, m, _)| m.start()).collect();
    let replicas: Vec<Uuid> = reserved.keys().map(|(_, _, r)| *r).collect();
    let units: Vec<i64> = reserved.values().copied().collect();
    sqlx::query!(
        "UPDATE key_quota_reservation r SET accounted = r.accounted + u.units
         FROM UNNEST($1::bigint[], $2::timestamptz[], $3::uuid[], $4::bigint[])
             AS u(key_id, month_start, replica, units)
         WHERE r.key_id = u.key_id AND r.month_start = u.month_start AND r.replica = u.replica",
        &keys,
        &months,
        &replicas,
        &units,
    )
    .execute(conn)
    .await?;
    Ok(())
}
