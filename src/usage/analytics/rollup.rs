//! What one accounting transaction adds to the rollup (SPEC §18): per key, UTC day and
//! route, the calls, units, upstream 5xx answers and latencies of the ledger rows it just
//! inserted. Written under the accounts' row locks, so the routes an account may still
//! add in a month are counted exactly across replicas.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::NaiveDate;
use sqlx::PgConnection;

use super::histogram::Histogram;
use super::latency::RowKey;
use super::routes::{OTHER, RouteBook};
use crate::month::Month;
use crate::usage::accounting::event::UsageEvent;

/// One rollup row's additions.
#[derive(Default)]
struct Adds {
    account_id: i64,
    calls: i64,
    units: i64,
    errors: i64,
    latency: Histogram,
}

/// Adds the accounted events to the rollup. Rows of a key id that does not exist (an
/// event delivered by hand) count for no key, as the ledger's `key_id` does.
pub async fn record(
    conn: &mut PgConnection,
    accounted: &[&UsageEvent],
    book: &RouteBook,
) -> Result<Vec<(RowKey, Histogram)>, sqlx::Error> {
    if accounted.is_empty() {
        return Ok(Vec::new());
    }
    let named: Vec<String> = accounted.iter().map(|e| book.name_of(&e.route)).collect();
    let allowed = bound_routes(conn, accounted, &named, book).await?;
    let mut rows: BTreeMap<(i64, NaiveDate, String), Adds> = BTreeMap::new();
    for (e, route) in accounted.iter().zip(named) {
        let month = Month::containing(e.occurred_at);
        let route = if allowed.contains(&(e.account_id, month, route.clone())) {
            route
        } else {
            OTHER.to_owned()
        };
        let day = e.occurred_at.date_naive();
        let adds = rows.entry((e.key_id, day, route)).or_default();
        adds.account_id = e.account_id;
        adds.calls += 1;
        adds.units += e.cost;
        adds.errors += i64::from(e.upstream_status >= 500);
        if let Some(micros) = e.latency_us {
            adds.latency.record(micros);
        }
    }
    let mut keys = Vec::with_capacity(rows.len());
    let mut days = Vec::with_capacity(rows.len());
    let mut routes = Vec::with_capacity(rows.len());
    let mut accounts = Vec::with_capacity(rows.len());
    let mut calls = Vec::with_capacity(rows.len());
    let mut units = Vec::with_capacity(rows.len());
    let mut errors = Vec::with_capacity(rows.len());
    let mut latencies = Vec::with_capacity(rows.len());
    for ((key_id, day, route), adds) in rows {
        keys.push(key_id);
        days.push(day);
        routes.push(route.clone());
        accounts.push(adds.account_id);
        calls.push(adds.calls);
        units.push(adds.units);
        errors.push(adds.errors);
        if adds.latency.total() > 0 {
            latencies.push(((key_id, day, route), adds.latency));
        }
    }
    // The latencies are merged apart, every few seconds (`latency.rs`).
    sqlx::query!(
        "INSERT INTO usage_rollup (key_id, day, route, account_id, calls, units, errors, latency)
         SELECT u.key_id, u.day, u.route, u.account_id, u.calls, u.units, u.errors, '{}'
         FROM UNNEST($1::bigint[], $2::date[], $3::text[], $4::bigint[], $5::bigint[],
                     $6::bigint[], $7::bigint[])
             AS u(key_id, day, route, account_id, calls, units, errors)
         JOIN api_key k ON k.id = u.key_id
         ON CONFLICT (key_id, day, route) DO UPDATE
             SET calls = usage_rollup.calls + EXCLUDED.calls,
                 units = usage_rollup.units + EXCLUDED.units,
                 errors = usage_rollup.errors + EXCLUDED.errors",
        &keys,
        &days,
        &routes,
        &accounts,
        &calls,
        &units,
        &errors,
    )
    .execute(conn)
    .await?;
    Ok(latencies)
}

/// The (account, month, route) triples of the batch that keep their own route: those
/// already in `usage_route`, and new ones while the account's month has room (recorded
/// now). The others count as `other`. Reads the table only for account-months with a
/// route this replica does not know yet.
async fn bound_routes(
    conn: &mut PgConnection,
    accounted: &[&UsageEvent],
    named: &[String],
    book: &RouteBook,
) -> Result<HashSet<(i64, Month, String)>, sqlx::Error> {
    let mut wanted: HashMap<(i64, Month), HashSet<&str>> = HashMap::new();
    for (e, route) in accounted.iter().zip(named) {
        wanted
            .entry((e.account_id, Month::containing(e.occurred_at)))
            .or_default()
            .insert(route.as_str());
    }
    let unknown: Vec<(i64, Month)> = wanted
        .iter()
        .filter(|((account, month), routes)| !book.all_known(*account, *month, routes))
        .map(|(k, _)| *k)
        .collect();
    if !unknown.is_empty() {
        let accounts: Vec<i64> = unknown.iter().map(|(a, _)| *a).collect();
        let months: Vec<NaiveDate> = unknown.iter().map(|(_, m)| month_date(*m)).collect();
        let stored = sqlx::query!(
            "SELECT r.account_id, r.month_start, r.route FROM usage_route r
             JOIN UNNEST($1::bigint[], $2::date[]) AS u(account_id, month_start)
               ON r.account_id = u.account_id AND r.month_start = u.month_start",
            &accounts,
            &months,
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut sets: HashMap<(i64, Month), HashSet<String>> =
            unknown.iter().map(|k| (*k, HashSet::new())).collect();
        for row in stored {
            let month = Month::containing(row.month_start.and_time(Default::default()).and_utc());
            sets.entry((row.account_id, month))
                .or_default()
                .insert(row.route);
        }
        let mut new_accounts = Vec::new();
        let mut new_months = Vec::new();
        let mut new_routes = Vec::new();
        for ((account, month), mut set) in sets {
            let mut wanted_here: Vec<&str> = wanted[&(account, month)].iter().copied().collect();
            wanted_here.sort_unstable();
            for route in wanted_here {
                if !set.contains(route) && set.len() < book.max_routes {
                    set.insert(route.to_owned());
                    new_accounts.push(account);
                    new_months.push(month_date(month));
                    new_routes.push(route.to_owned());
                }
            }
            book.learn(account, month, set);
        }
        if !new_routes.is_empty() {
            sqlx::query!(
                "INSERT INTO usage_route (account_id, month_start, route)
                 SELECT * FROM UNNEST($1::bigint[], $2::date[], $3::text[])
                 ON CONFLICT DO NOTHING",
                &new_accounts,
                &new_months,
                &new_routes,
            )
            .execute(&mut *conn)
            .await?;
        }
    }
    let mut allowed = HashSet::new();
    for ((account, month), routes) in wanted {
        let known = book.known(account, month);
        for route in routes {
            if known.contains(route) {
                allowed.insert((account, month, route.to_owned()));
            }
        }
    }
    Ok(allowed)
}

/// A month as the `date` of its first day.
fn month_date(month: Month) -> NaiveDate {
    month.start().date_naive()
}
