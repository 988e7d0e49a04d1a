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
use crate::month::{Day, Month};

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

/// Adds the inserted rows to the per-key monthly counters (`(calls, units)`). Keys that
/// do not exist (an event delivered by hand) count for none.
pub(super) async fn bump_key_counters(
    conn: &mut sqlx::PgConnection,
    per_key: &BTreeMap<(i64, Month), (i64, i64)>,
) -> Result<(), sqlx::Error> {
    bump(conn, KEYS, per_key, |m| m.start(), |figures| *figures).await?;
    Ok(())
}

/// The two statements of one counter table: the update of the rows that exist, and the
/// insert of the others (`$1` accounts, `$2` window starts, `$3` calls, `$4` units).
struct Counter {
    update: &'static str,
    insert: &'static str,
}

const KEYS: Counter = Counter {
    update: "UPDATE key_usage_counter c SET calls = c.calls + u.calls, used = c.used + u.units
         FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[], $4::bigint[])
             AS u(key_id, start, calls, units)
         WHERE c.key_id = u.key_id AND c.month_start = u.start
         RETURNING c.key_id, c.month_start, c.used",
    insert: "INSERT INTO key_usage_counter (key_id, month_start, calls, used)
         SELECT u.key_id, u.start, u.calls, u.units
         FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[], $4::bigint[])
             AS u(key_id, start, calls, units)
         JOIN api_key k ON k.id = u.key_id
         ON CONFLICT (key_id, month_start) DO UPDATE
             SET calls = key_usage_counter.calls + EXCLUDED.calls,
                 used = key_usage_counter.used + EXCLUDED.used
         RETURNING key_id, month_start, used",
};

/// Adds `(calls, units)` to each `(account, window)` of `adds` in one counter table:
/// one update for the rows that exist, one insert only when some do not yet.
async fn bump<W: Copy + Ord, V>(
    conn: &mut sqlx::PgConnection,
    counter: Counter,
    adds: &BTreeMap<(i64, W), V>,
    start: impl Fn(W) -> DateTime<Utc>,
    figures: impl Fn(&V) -> (i64, i64),
) -> Result<Vec<(i64, DateTime<Utc>, i64)>, sqlx::Error> {
    if adds.is_empty() {
        return Ok(Vec::new());
    }
    let arrays = |adds: &mut dyn Iterator<Item = (&(i64, W), &V)>| {
        let (mut accounts, mut starts, mut calls, mut units) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for ((account, window), value) in adds {
            let (c, u) = figures(value);
            accounts.push(*account);
            starts.push(start(*window));
            calls.push(c);
            units.push(u);
        }
        (accounts, starts, calls, units)
    };
    let (accounts, starts, calls, units) = arrays(&mut adds.iter());
    let mut rows: Vec<(i64, DateTime<Utc>, i64)> = sqlx::query_as(counter.update)
        .bind(accounts)
        .bind(starts)
        .bind(calls)
        .bind(units)
        .fetch_all(&mut *conn)
        .await?;
    if rows.len() < adds.len() {
        let found: HashSet<(i64, DateTime<Utc>)> = rows.iter().map(|(a, s, _)| (*a, *s)).collect();
        let (accounts, starts, calls, units) = arrays(
            &mut adds
                .iter()
                .filter(|((a, w), _)| !found.contains(&(*a, start(*w)))),
        );
        let inserted: Vec<(i64, DateTime<Utc>, i64)> = sqlx::query_as(counter.insert)
            .bind(accounts)
            .bind(starts)
            .bind(calls)
            .bind(units)
            .fetch_all(conn)
            .await?;
        rows.extend(inserted);
    }
    Ok(rows)
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
