//! The statements one accounting transaction runs (see `ledger.rs`): ledger rows,
//! per-key counters, reservation settling and credit spending (the account counters
//! are `counters.rs`'s).
//!
//! Each is one set-based statement per batch over arrays (`UNNEST`), whatever the
//! batch's size. Every statement runs with the rows' accounts row-locked, so no other
//! transaction writes their ledger rows or counters meanwhile: a ledger row is skipped
//! when it exists (`NOT EXISTS`, cheaper than `ON CONFLICT`'s speculative insertion,
//! with the primary key still refusing a duplicate), and a counter is updated in place,
//! only a month's or day's first counter being inserted.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::event::UsageEvent;
use crate::month::Day;

pub(super) async fn insert_ledger_rows(
    conn: &mut sqlx::PgConnection,
    events: &[&UsageEvent],
    subscription_of: &HashMap<Uuid, Option<i64>>,
) -> Result<HashSet<Uuid>, sqlx::Error> {
    let n = events.len();
    let (
        mut ids,
        mut accounts,
        mut subs,
        mut keys,
        mut times,
        mut methods,
        mut routes,
        mut statuses,
        mut costs,
    ) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for e in events {
        ids.push(e.transaction_id);
        accounts.push(e.account_id);
        subs.push(subscription_of.get(&e.transaction_id).copied().flatten());
        keys.push(e.key_id);
        times.push(e.occurred_at);
        methods.push(e.method.as_str());
        routes.push(e.route.as_str());
        statuses.push(e.upstream_status as i16);
        costs.push(e.cost);
    }
    let inserted: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO subscription_tracking
             (transaction_id, account_id, subscription_id, key_id, occurred_at, method, route,
              upstream_status, cost)
         SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[],
                              $5::timestamptz[], $6::text[], $7::text[], $8::smallint[],
                              $9::bigint[])
             AS u(transaction_id, account_id, subscription_id, key_id, occurred_at, method,
                  route, upstream_status, cost)
         WHERE NOT EXISTS (
             SELECT 1 FROM subscription_tracking t
             WHERE t.account_id = u.account_id AND t.occurred_at = u.occurred_at
               AND t.transaction_id = u.transaction_id)
         RETURNING transaction_id",
    )
    .bind(ids)
    .bind(accounts)
    .bind(subs)
    .bind(keys)
    .bind(times)
    .bind(methods)
    .bind(routes)
    .bind(statuses)
    .bind(costs)
    .fetch_all(conn)
    .await?;
    Ok(inserted.into_iter().collect())
}

/// Moves units of hard plans from "reserved by a replica" to "accounted".
pub(super) async fn settle_reservations(
    conn: &mut sqlx::PgConnection,
    reserved: &BTreeMap<(i64, Day, Uuid), i64>,
) -> Result<(), sqlx::Error> {
    if reserved.is_empty() {
        return Ok(());
    }
    let accounts: Vec<i64> = reserved.keys().map(|(a, _, _)| *a).collect();
    let days: Vec<DateTime<Utc>> = reserved.keys().map(|(_, d, _)| d.start()).collect();
    let replicas: Vec<Uuid> = reserved.keys().map(|(_, _, r)| *r).collect();
    let units: Vec<i64> = reserved.values().copied().collect();
    sqlx::query(
        "UPDATE quota_reservation r SET accounted = r.accounted + u.units
         FROM UNNEST($1::bigint[], $2::timestamptz[], $3::uuid[], $4::bigint[])
             AS u(account_id, day_start, replica, units)
         WHERE r.account_id = u.account_id AND r.day_start = u.day_start
           AND r.replica = u.replica",
    )
    .bind(accounts)
    .bind(days)
    .bind(replicas)
    .bind(units)
    .execute(conn)
    .await?;
    Ok(())
}

/// Takes spent units off their top-up grants.
pub(super) async fn spend(
    conn: &mut sqlx::PgConnection,
    spent: &[(i64, i64)],
) -> Result<(), sqlx::Error> {
    if spent.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = spent.iter().map(|(id, _)| *id).collect();
    let units: Vec<i64> = spent.iter().map(|(_, u)| *u).collect();
    sqlx::query(
        "UPDATE credit_grant g SET remaining = g.remaining - s.units
         FROM UNNEST($1::bigint[], $2::bigint[]) AS s(id, units) WHERE g.id = s.id",
    )
    .bind(ids)
    .bind(units)
    .execute(conn)
    .await?;
    Ok(())
}
