//! The account counters one batch bumps: `usage_counter`, a row per account and month
//! holding the month's `used` and its *open day* (`day_start`, `day_calls`,
//! `day_used`: the latest day with calls), and `usage_daily_closed`, the days before
//! it. Readers see both through the view `usage_daily` (migration V16).
//!
//! In steady state one statement updates every account's month and day at once. The
//! first events of an account's new day (or month) take the slower way, once a day:
//! the open day's figures move to `usage_daily_closed` and the row opens the new day.
//! An event of a day older than the open one is added to `usage_daily_closed` directly.
//! The batch holds its accounts' row locks, so nothing else writes these rows meanwhile.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::month::{Day, Month};

/// A batch's figures of one account and month: the month's units, and the calls and
/// units of each of its days.
#[derive(Debug, Default)]
pub(super) struct MonthFigures {
    pub units: i64,
    pub days: BTreeMap<Day, (i64, i64)>,
}

/// The counters after a batch: `used` per account and month, and per account and day
/// (for every day the batch counted).
#[derive(Debug, Default)]
pub(super) struct Counted {
    pub used: HashMap<(i64, Month), i64>,
    pub used_on: HashMap<(i64, Day), i64>,
}

/// One `(account, month)` of the batch as the statements' arrays take it: its latest
/// day and that day's figures, and the month's units.
struct Pair {
    account: i64,
    month: Month,
    day: Day,
    day_calls: i64,
    day_units: i64,
    units: i64,
}

/// Adds `figures` to the counters, and returns them as they stand after.
pub(super) async fn bump_usage(
    conn: &mut PgConnection,
    figures: &BTreeMap<(i64, Month), MonthFigures>,
) -> Result<Counted, sqlx::Error> {
    let pairs: Vec<Pair> = figures
        .iter()
        .filter_map(|(&(account, month), f)| {
            let (&day, &(day_calls, day_units)) = f.days.last_key_value()?;
            Some(Pair {
                account,
                month,
                day,
                day_calls,
                day_units,
                units: f.units,
            })
        })
        .collect();
    if pairs.is_empty() {
        return Ok(Counted::default());
    }
    let mut rows = add(conn, ADD_ON_OPEN_DAY, &pairs).await?;
    if rows.len() < pairs.len() {
        let done: HashSet<(i64, DateTime<Utc>)> = rows.iter().map(|r| (r.0, r.1)).collect();
        let rest: Vec<Pair> = pairs
            .into_iter()
            .filter(|p| !done.contains(&(p.account, p.month.start())))
            .collect();
        open_days(conn, &rest).await?;
        rows.extend(add(conn, ADD, &rest).await?);
    }
    let mut counted = Counted::default();
    let mut open = HashMap::with_capacity(rows.len());
    for (account, month_start, used, day_start, day_used) in rows {
        let month = Month::containing(month_start);
        counted.used.insert((account, month), used);
        let Some(day_start) = day_start else {
            continue;
        };
        let day = Day::containing(day_start);
        // The open day may be one this batch did not count (its events were all late).
        let counted_that_day = figures
            .get(&(account, month))
            .is_some_and(|f| f.days.contains_key(&day));
        if counted_that_day {
            counted.used_on.insert((account, day), day_used);
        }
        open.insert((account, month_start), day);
    }
    // Days the open day is not (earlier ones, or all of a month whose row is ahead).
    let closed: BTreeMap<(i64, Day), (i64, i64)> = figures
        .iter()
        .flat_map(|(&(account, month), f)| {
            let open = open.get(&(account, month.start())).copied();
            f.days
                .iter()
                .filter(move |(day, _)| Some(**day) != open)
                .map(move |(&day, &figures)| ((account, day), figures))
        })
        .collect();
    counted.used_on.extend(add_closed(conn, &closed).await?);
    Ok(counted)
}

/// The counter update: the month's units to every row the condition keeps, and the
/// day's figures where the pair's day is the open one.
macro_rules! add_sql {
    ($condition:literal) => {
        concat!(
            "UPDATE usage_counter c
     SET used = c.used + u.units,
         day_calls = c.day_calls + CASE WHEN c.day_start = u.day_start THEN u.day_calls ELSE 0 END,
         day_used = c.day_used + CASE WHEN c.day_start = u.day_start THEN u.day_units ELSE 0 END
     FROM UNNEST($1::bigint[], $2::timestamptz[], $3::timestamptz[], $4::bigint[],
                 $5::bigint[], $6::bigint[])
         AS u(account_id, month_start, day_start, day_calls, day_units, units)
     WHERE c.account_id = u.account_id AND c.month_start = u.month_start",
            $condition,
            "
     RETURNING c.account_id, c.month_start, c.used, c.day_start, c.day_used"
        )
    };
}

/// Rows whose open day is the pair's day or a later one (a batch of late events only);
/// rows with an earlier open day, or none, are left alone.
const ADD_ON_OPEN_DAY: &str = add_sql!(" AND c.day_start >= u.day_start");

/// Every pair's row (once [`open_days`] has opened their days).
const ADD: &str = add_sql!("");

type CounterRow = (i64, DateTime<Utc>, i64, Option<DateTime<Utc>>, i64);

async fn add(
    conn: &mut PgConnection,
    sql: &'static str,
    pairs: &[Pair],
) -> Result<Vec<CounterRow>, sqlx::Error> {
    sqlx::query_as(sql)
        .bind(pairs.iter().map(|p| p.account).collect::<Vec<_>>())
        .bind(pairs.iter().map(|p| p.month.start()).collect::<Vec<_>>())
        .bind(pairs.iter().map(|p| p.day.start()).collect::<Vec<_>>())
        .bind(pairs.iter().map(|p| p.day_calls).collect::<Vec<_>>())
        .bind(pairs.iter().map(|p| p.day_units).collect::<Vec<_>>())
        .bind(pairs.iter().map(|p| p.units).collect::<Vec<_>>())
        .fetch_all(conn)
        .await
}

/// Makes the pairs' rows (a month's first calls), and opens each pair's day on rows
/// whose open day is earlier (or none): the old open day's figures move to
/// `usage_daily_closed`, and whatever that table already holds of the new day moves
/// onto the row, so a day is never in both places.
async fn open_days(conn: &mut PgConnection, pairs: &[Pair]) -> Result<(), sqlx::Error> {
    let accounts: Vec<i64> = pairs.iter().map(|p| p.account).collect();
    let months: Vec<DateTime<Utc>> = pairs.iter().map(|p| p.month.start()).collect();
    let days: Vec<DateTime<Utc>> = pairs.iter().map(|p| p.day.start()).collect();
    sqlx::query(
        "INSERT INTO usage_counter (account_id, month_start, used)
         SELECT account_id, month_start, 0
         FROM UNNEST($1::bigint[], $2::timestamptz[]) AS u(account_id, month_start)
         ON CONFLICT (account_id, month_start) DO NOTHING",
    )
    .bind(&accounts)
    .bind(&months)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "WITH opening AS (
             SELECT c.account_id, c.month_start, c.day_start AS old_day,
                    c.day_calls AS old_calls, c.day_used AS old_used, u.day_start AS new_day
             FROM usage_counter c
             JOIN UNNEST($1::bigint[], $2::timestamptz[], $3::timestamptz[])
                 AS u(account_id, month_start, day_start)
               ON c.account_id = u.account_id AND c.month_start = u.month_start
             WHERE c.day_start IS NULL OR c.day_start < u.day_start
         ),
         closing AS (
             INSERT INTO usage_daily_closed (account_id, day_start, calls, used)
             SELECT account_id, old_day, old_calls, old_used FROM opening
             WHERE old_day IS NOT NULL AND (old_calls > 0 OR old_used > 0)
             ON CONFLICT (account_id, day_start) DO UPDATE
                 SET calls = usage_daily_closed.calls + EXCLUDED.calls,
                     used = usage_daily_closed.used + EXCLUDED.used
         ),
         taken AS (
             DELETE FROM usage_daily_closed d USING opening o
             WHERE d.account_id = o.account_id AND d.day_start = o.new_day
             RETURNING d.account_id, d.day_start, d.calls, d.used
         )
         UPDATE usage_counter c
         SET day_start = o.new_day, day_calls = coalesce(t.calls, 0),
             day_used = coalesce(t.used, 0)
         FROM opening o
         LEFT JOIN taken t ON t.account_id = o.account_id AND t.day_start = o.new_day
         WHERE c.account_id = o.account_id AND c.month_start = o.month_start",
    )
    .bind(&accounts)
    .bind(&months)
    .bind(&days)
    .execute(conn)
    .await?;
    Ok(())
}

/// Adds figures of days that are not their row's open day to `usage_daily_closed`;
/// returns those days' `used`.
async fn add_closed(
    conn: &mut PgConnection,
    closed: &BTreeMap<(i64, Day), (i64, i64)>,
) -> Result<Vec<((i64, Day), i64)>, sqlx::Error> {
    if closed.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(i64, DateTime<Utc>, i64)> = sqlx::query_as(
        "INSERT INTO usage_daily_closed (account_id, day_start, calls, used)
         SELECT * FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[], $4::bigint[])
         ON CONFLICT (account_id, day_start) DO UPDATE
             SET calls = usage_daily_closed.calls + EXCLUDED.calls,
                 used = usage_daily_closed.used + EXCLUDED.used
         RETURNING account_id, day_start, used",
    )
    .bind(closed.keys().map(|(a, _)| *a).collect::<Vec<_>>())
    .bind(closed.keys().map(|(_, d)| d.start()).collect::<Vec<_>>())
    .bind(closed.values().map(|(c, _)| *c).collect::<Vec<_>>())
    .bind(closed.values().map(|(_, u)| *u).collect::<Vec<_>>())
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(account, start, used)| ((account, Day::containing(start)), used))
        .collect())
}
