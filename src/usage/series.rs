//! Operators' reads (SPEC §3.3): the accounts of the current month with where they
//! stand, and one account's calls and units per UTC day.

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::PgConnection;

use super::report::standings;
use super::rules::{FREE_PLAN, Standing};
use crate::month::{Day, Month};

/// One row of the account list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRow {
    pub account_id: i64,
    pub email: String,
    pub standing: Standing,
}

/// A page of the account list and where the next one starts.
#[derive(Debug, Clone, Default)]
pub struct AccountPage {
    pub accounts: Vec<AccountRow>,
    pub next_cursor: Option<i64>,
}

/// Accounts scanned at most per page when only exhausted ones are wanted.
const MAX_SCAN: i64 = 5_000;

/// Accounts with ids above `after`, in id order, matching `query` (a substring of the
/// email, or exactly the id), at most `limit`; with `exhausted_only`, only those with
/// nothing left this month (a page may then hold fewer, with a cursor to go on).
pub async fn accounts(
    conn: &mut PgConnection,
    query: Option<&str>,
    exhausted_only: bool,
    after: i64,
    limit: i64,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
) -> Result<AccountPage, sqlx::Error> {
    let month = Month::containing(now);
    let pattern = query.map(|q| format!("%{}%", escape_like(&q.to_lowercase())));
    let exact_id = query.and_then(|q| q.trim().parse::<i64>().ok());
    let scan = if exhausted_only { MAX_SCAN } else { limit + 1 };
    let rows: Vec<(i64, String)> = if exhausted_only {
        // An exhausted account has used at least its allowance this month: the free
        // grant, or a smaller figure named by one of its paid subscriptions or by one of
        // this month's snapshots. Only the few accounts that pass are joined and then
        // judged by their standing; each part reads one month of `usage_counter`, the
        // subscriptions below the free grant, or one month of snapshots, never one row
        // per account and subscription.
        sqlx::query_as(
            "WITH candidate AS (
                 SELECT account_id FROM usage_counter WHERE month_start = $4 AND used >= $5
                 UNION
                 SELECT c.account_id
                 FROM usage_counter c
                 JOIN (SELECT account_id, monthly_allowance AS low FROM subscription
                       WHERE plan <> $6 AND monthly_allowance < $5
                       UNION ALL
                       SELECT account_id, allowance FROM monthly_usage
                       WHERE month_start = $4 AND allowance < $5) small
                   ON small.account_id = c.account_id
                 WHERE c.month_start = $4 AND c.used >= small.low)
             SELECT a.id, a.email FROM candidate k JOIN account a ON a.id = k.account_id
             WHERE a.id > $1
               AND ($2::text IS NULL OR lower(a.email) LIKE $2 ESCAPE '\\' OR a.id = $3)
             ORDER BY a.id LIMIT $7",
        )
        .bind(after)
        .bind(&pattern)
        .bind(exact_id)
        .bind(month.start())
        .bind(free_monthly_calls)
        .bind(FREE_PLAN)
        .bind(scan)
        .fetch_all(&mut *conn)
        .await?
    } else {
        sqlx::query_as(
            "SELECT a.id, a.email FROM account a
             WHERE a.id > $1
               AND ($2::text IS NULL OR lower(a.email) LIKE $2 ESCAPE '\\' OR a.id = $3)
             ORDER BY a.id LIMIT $4",
        )
        .bind(after)
        .bind(&pattern)
        .bind(exact_id)
        .bind(scan)
        .fetch_all(&mut *conn)
        .await?
    };
    let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
    let mut by_id: std::collections::HashMap<i64, Standing> =
        standings(conn, &ids, month, now, free_monthly_calls)
            .await?
            .into_iter()
            .map(|s| (s.account_id, s))
            .collect();
    let mut page = AccountPage::default();
    let scanned_all = (rows.len() as i64) < scan;
    let mut last_scanned = None;
    for (account_id, email) in rows {
        if page.accounts.len() as i64 == limit {
            // More rows follow what this page shows.
            page.next_cursor = page.accounts.last().map(|r| r.account_id);
            return Ok(page);
        }
        last_scanned = Some(account_id);
        let Some(standing) = by_id.remove(&account_id) else {
            continue;
        };
        if exhausted_only && !standing.exhausted() {
            continue;
        }
        page.accounts.push(AccountRow {
            account_id,
            email,
            standing,
        });
    }
    if !scanned_all {
        page.next_cursor = last_scanned;
    }
    Ok(page)
}

/// Every account with nothing left this month, in id order: how many there are, and
/// the first `show` of them (the account list's exhausted filter, run to its end).
pub async fn exhausted_now(
    conn: &mut PgConnection,
    show: usize,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
) -> Result<(usize, Vec<AccountRow>), sqlx::Error> {
    let mut count = 0;
    let mut shown = Vec::new();
    let mut after = 0;
    loop {
        let page = accounts(conn, None, true, after, MAX_SCAN, now, free_monthly_calls).await?;
        count += page.accounts.len();
        let room = show.saturating_sub(shown.len());
        shown.extend(page.accounts.into_iter().take(room));
        match page.next_cursor {
            Some(next) => after = next,
            None => return Ok((count, shown)),
        }
    }
}

/// The `limit` accounts that used the most units this month, most first (ties: the
/// older account first), with where they stand.
pub async fn top_accounts(
    conn: &mut PgConnection,
    limit: i64,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
) -> Result<Vec<AccountRow>, sqlx::Error> {
    let month = Month::containing(now);
    // The month's counters alone are ranked first, so only the winners are joined.
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT t.account_id, a.email
         FROM (SELECT account_id, used FROM usage_counter WHERE month_start = $1
               ORDER BY used DESC, account_id LIMIT $2) t
         JOIN account a ON a.id = t.account_id
         ORDER BY t.used DESC, t.account_id",
    )
    .bind(month.start())
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
    let mut by_id: std::collections::HashMap<i64, Standing> =
        standings(conn, &ids, month, now, free_monthly_calls)
            .await?
            .into_iter()
            .map(|s| (s.account_id, s))
            .collect();
    Ok(rows
        .into_iter()
        .filter_map(|(account_id, email)| {
            by_id.remove(&account_id).map(|standing| AccountRow {
                account_id,
                email,
                standing,
            })
        })
        .collect())
}

fn escape_like(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// One UTC day of an account's usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayUsage {
    pub day: NaiveDate,
    pub calls: i64,
    pub cost: i64,
}

/// Every UTC day of `month` up to today (all of a past month, none of a future one),
/// with the calls and units accounted on it (zero on days without calls).
pub async fn daily(
    conn: &mut PgConnection,
    account_id: i64,
    month: Month,
    now: DateTime<Utc>,
) -> Result<Vec<DayUsage>, sqlx::Error> {
    let rows: Vec<(DateTime<Utc>, i64, i64)> = sqlx::query_as(
        "SELECT day_start, calls, used FROM usage_daily
         WHERE account_id = $1 AND day_start >= $2 AND day_start < $3",
    )
    .bind(account_id)
    .bind(month.start())
    .bind(month.end())
    .fetch_all(conn)
    .await?;
    Ok(days_of(month, now, &rows))
}

/// How long the days before today of [`daily_totals`] are reused before being read again.
pub const PAST_DAYS_FRESH: chrono::Duration = chrono::Duration::seconds(60);

/// Figures of whole days (day start, calls, units).
type DayRows = Vec<(DateTime<Utc>, i64, i64)>;

/// The days before today of the last [`daily_totals`] read, per replica. Summing a whole
/// month of days (a row per account and day) is the costly part of the
/// overview, and a day that is over changes only when events arrive late (a backlog
/// drained after an outage): its figures are reused for [`PAST_DAYS_FRESH`], today's are
/// read every time.
#[derive(Debug, Default)]
pub struct PastDays(std::sync::Mutex<Option<PastRead>>);

#[derive(Debug, Clone)]
struct PastRead {
    month: Month,
    until: DateTime<Utc>,
    at: DateTime<Utc>,
    rows: DayRows,
}

/// Every UTC day of `month` up to today with the calls and units of every account.
pub async fn daily_totals(
    conn: &mut PgConnection,
    past: &PastDays,
    month: Month,
    now: DateTime<Utc>,
) -> Result<Vec<DayUsage>, sqlx::Error> {
    let until = Day::containing(now)
        .start()
        .clamp(month.start(), month.end());
    let kept = crate::sync::lock(&past.0)
        .as_ref()
        .filter(|r| r.month == month && r.until == until && now - r.at < PAST_DAYS_FRESH)
        .map(|r| r.rows.clone());
    let mut rows = match kept {
        Some(rows) => rows,
        None => {
            let rows = totals_between(conn, month.start(), until).await?;
            *crate::sync::lock(&past.0) = Some(PastRead {
                month,
                until,
                at: now,
                rows: rows.clone(),
            });
            rows
        }
    };
    // Today only: no day after it has calls yet.
    let today_end = Day::containing(until).end().min(month.end());
    rows.extend(totals_between(conn, until, today_end).await?);
    Ok(days_of(month, now, &rows))
}

/// Calls and units of every account per day starting in `[from, to)`: the closed days
/// and the open ones summed per day at once, not through the view `usage_daily`, whose
/// sum per account and day first would cost eight times as much over a month.
async fn totals_between(
    conn: &mut PgConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<DayRows, sqlx::Error> {
    if from >= to {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "SELECT day_start, sum(calls)::int8, sum(used)::int8 FROM (
             SELECT day_start, calls, used FROM usage_daily_closed
             WHERE day_start >= $1 AND day_start < $2
             UNION ALL
             SELECT day_start, day_calls, day_used FROM usage_counter
             WHERE day_start >= $1 AND day_start < $2
         ) AS days
         GROUP BY day_start",
    )
    .bind(from)
    .bind(to)
    .fetch_all(conn)
    .await
}

/// The days of `month` up to the one holding `now`, filled from `rows`.
pub fn days_of(
    month: Month,
    now: DateTime<Utc>,
    rows: &[(DateTime<Utc>, i64, i64)],
) -> Vec<DayUsage> {
    let mut out = Vec::new();
    let mut day = Day::containing(month.start());
    while day.start() < month.end() && day.start() <= now {
        let (calls, cost) = rows
            .iter()
            .find(|(start, _, _)| *start == day.start())
            .map_or((0, 0), |(_, c, u)| (*c, *u));
        out.push(DayUsage {
            day: day.start().date_naive(),
            calls,
            cost,
        });
        day = Day::containing(day.end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_is_listed_up_to_today_with_empty_days_as_zero() {
        let nov: Month = "2026-11".parse().unwrap();
        let now: DateTime<Utc> = "2026-11-03T10:00:00Z".parse().unwrap();
        let second: DateTime<Utc> = "2026-11-02T00:00:00Z".parse().unwrap();
        let days = days_of(nov, now, &[(second, 4, 9)]);
        assert_eq!(days.len(), 3);
        assert_eq!((days[0].calls, days[0].cost), (0, 0));
        assert_eq!((days[1].calls, days[1].cost), (4, 9));
        assert_eq!(days[2].day.to_string(), "2026-11-03");
    }

    #[test]
    fn a_past_month_has_all_its_days_and_a_future_one_none() {
        let oct: Month = "2026-10".parse().unwrap();
        let now: DateTime<Utc> = "2026-11-03T10:00:00Z".parse().unwrap();
        assert_eq!(days_of(oct, now, &[]).len(), 31);
        assert!(days_of("2026-12".parse().unwrap(), now, &[]).is_empty());
    }
}
