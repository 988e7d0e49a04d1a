//! Where an account stands in a month: plan, allowance, used, remaining (SPEC §3.4).
//!
//! `used` comes from `usage_counter`, so a report costs a few indexed lookups whatever
//! the account's volume. The same standing drives exhaustion, activation and
//! reconciliation, so all of them agree with what the customer is shown.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use super::grants::{allowance_of, load_snapshots, load_subscriptions};
use super::rules::{
    Budget, Enforcement, FREE_PLAN, PlanTerms, Standing, Subscription, active_subscription,
    next_change, standing_of,
};
use super::spending::{Credit, credits_at};
use crate::month::{Day, Month};

/// The usage object of SPEC §3.4.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct UsageReport {
    #[schema(minimum = 1)]
    pub account_id: i64,
    /// First instant of the UTC month (inclusive).
    pub month_start: DateTime<Utc>,
    /// First instant of the next UTC month (exclusive).
    pub month_end: DateTime<Utc>,
    /// The active subscription's plan; `free` when no paid one is active.
    pub plan: String,
    #[schema(minimum = 0)]
    pub allowance: i64,
    /// Units accounted in the month (a call costs 1 unless priced otherwise); may
    /// exceed `allowance`: soft throttling admits some calls past it.
    #[schema(minimum = 0)]
    pub used: i64,
    /// `max(0, allowance - used) + credits`.
    #[schema(minimum = 0)]
    pub remaining: i64,
    /// `remaining == 0`.
    pub exhausted: bool,
    /// Top-up units left.
    pub credits: i64,
    pub enforcement: Enforcement,
    /// The day's window, or `null` when the plan has no daily allowance.
    pub daily: Option<DailyReport>,
    /// What the units of this UTC day and month cost at the plan's `unit_price_micros`
    /// (SPEC §20); 0 when the plan has no price.
    pub spent_micros: SpentReport,
    /// The active subscription's minute window, price and caps, for the pages that show
    /// them beside the figures; not part of the usage object.
    #[serde(skip)]
    pub budget: Budget,
}

/// Money spent, in micro-USD.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct SpentReport {
    #[schema(minimum = 0)]
    pub day: i64,
    #[schema(minimum = 0)]
    pub month: i64,
}

/// The daily window of a usage object.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct DailyReport {
    pub day_start: DateTime<Utc>,
    pub allowance: i64,
    pub used: i64,
    pub remaining: i64,
}

/// Calls accounted per account in `month`; accounts without calls are absent.
pub async fn load_used(
    conn: &mut PgConnection,
    account_ids: &[i64],
    month: Month,
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    let rows: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT account_id, used FROM usage_counter WHERE account_id = ANY($1) AND month_start = $2",
    )
    .bind(account_ids)
    .bind(month.start())
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Units accounted per account on `day`; accounts without calls are absent.
pub async fn load_daily_used(
    conn: &mut PgConnection,
    account_ids: &[i64],
    day: Day,
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    let rows: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT account_id, used FROM usage_daily WHERE account_id = ANY($1) AND day_start = $2",
    )
    .bind(account_ids)
    .bind(day.start())
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Top-up grants with units left, by account.
pub async fn load_credits(
    conn: &mut PgConnection,
    account_ids: &[i64],
) -> Result<HashMap<i64, Vec<Credit>>, sqlx::Error> {
    let rows: Vec<Credit> = sqlx::query_as(
        "SELECT id, account_id, remaining, expires_at FROM credit_grant
         WHERE account_id = ANY($1) AND remaining > 0",
    )
    .bind(account_ids)
    .fetch_all(conn)
    .await?;
    let mut by_account: HashMap<i64, Vec<Credit>> = HashMap::new();
    for credit in rows {
        by_account
            .entry(credit.account_id)
            .or_default()
            .push(credit);
    }
    Ok(by_account)
}

/// Standings of `account_ids` in `month`, judged at `month.judged_at(now)`.
/// Accounts that do not exist are left out.
pub async fn standings(
    conn: &mut PgConnection,
    account_ids: &[i64],
    month: Month,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
) -> Result<Vec<Standing>, sqlx::Error> {
    let subs = load_subscriptions(conn, account_ids).await?;
    let at = month.judged_at(now);
    let day = Day::containing(at);
    let active: Vec<(i64, Option<Subscription>)> = account_ids
        .iter()
        .map(|id| {
            let chosen = subs
                .get(id)
                .and_then(|list| active_subscription(list, at))
                .cloned();
            (*id, chosen)
        })
        .collect();
    let keys: Vec<(i64, Month)> = active
        .iter()
        .filter_map(|(_, s)| s.as_ref().map(|s| (s.id, month)))
        .collect();
    let snapshots = load_snapshots(conn, &keys).await?;
    let used = load_used(conn, account_ids, month).await?;
    let daily_used = load_daily_used(conn, account_ids, day).await?;
    let credits = load_credits(conn, account_ids).await?;
    Ok(active
        .into_iter()
        .filter(|(id, sub)| sub.is_some() || used.contains_key(id))
        .map(|(account_id, sub)| {
            let changes_at = subs.get(&account_id).and_then(|list| next_change(list, at));
            let credits = credits
                .get(&account_id)
                .map_or(0, |list| credits_at(list, at));
            let used = used.get(&account_id).copied().unwrap_or(0);
            let day_used = daily_used.get(&account_id).copied().unwrap_or(0);
            match sub {
                Some(s) => {
                    let allowance = allowance_of(&s, month, &snapshots, free_monthly_calls);
                    Standing {
                        next_change: changes_at,
                        ..standing_of(&s, allowance, used, credits, day_used)
                    }
                }
                None => Standing {
                    terms: None,
                    next_change: changes_at,
                    account_id,
                    plan: FREE_PLAN.to_owned(),
                    enforcement: Enforcement::Soft,
                    allowance: free_monthly_calls,
                    used,
                    credits,
                    daily: None,
                    day_used: 0,
                },
            }
        })
        .collect())
}

/// Whether the account exists.
pub async fn account_exists(conn: &mut PgConnection, account_id: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM account WHERE id = $1) AS "exists!""#,
        account_id
    )
    .fetch_one(conn)
    .await
}

/// The usage object of one account, or `None` when the account does not exist.
pub async fn usage_report(
    conn: &mut PgConnection,
    account_id: i64,
    month: Month,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
) -> Result<Option<UsageReport>, sqlx::Error> {
    if !account_exists(conn, account_id).await? {
        return Ok(None);
    }
    let standing = standings(conn, &[account_id], month, now, free_monthly_calls)
        .await?
        .into_iter()
        .next()
        .unwrap_or(Standing {
            terms: None,
            next_change: None,
            account_id,
            plan: FREE_PLAN.into(),
            enforcement: Enforcement::Soft,
            allowance: free_monthly_calls,
            used: 0,
            credits: 0,
            daily: None,
            day_used: 0,
        });
    let day = Day::containing(month.judged_at(now));
    let budget = standing
        .terms
        .as_ref()
        .map(|t| t.budget)
        .unwrap_or_default();
    Ok(Some(UsageReport {
        budget,
        spent_micros: SpentReport {
            day: budget.spent(standing.day_used),
            month: budget.spent(standing.used),
        },
        account_id,
        month_start: month.start(),
        month_end: month.end(),
        remaining: standing.remaining(),
        exhausted: standing.exhausted(),
        daily: standing.daily.map(|d| DailyReport {
            day_start: day.start(),
            allowance: d.allowance,
            used: d.used,
            remaining: d.remaining(),
        }),
        plan: standing.plan,
        allowance: standing.allowance,
        used: standing.used,
        credits: standing.credits,
        enforcement: standing.enforcement,
    }))
}

/// What an account's active subscription includes now (SPEC §17).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct EntitlementsReport {
    /// The active subscription's plan; `free` when no paid one is active.
    pub plan: String,
    /// The features it includes; routes listed in `entitlements.routes` need theirs.
    pub features: Vec<String>,
}

/// The entitlements of one account now, or `None` when the account does not exist;
/// `free` are the free grant's terms.
pub async fn entitlements(
    conn: &mut PgConnection,
    account_id: i64,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
    free: &PlanTerms,
) -> Result<Option<EntitlementsReport>, sqlx::Error> {
    if !account_exists(conn, account_id).await? {
        return Ok(None);
    }
    let standing = standings(
        conn,
        &[account_id],
        Month::containing(now),
        now,
        free_monthly_calls,
    )
    .await?
    .into_iter()
    .next();
    let (plan, terms) = match standing {
        Some(s) => (s.plan, s.terms),
        None => (FREE_PLAN.to_owned(), None),
    };
    Ok(Some(EntitlementsReport {
        plan,
        features: terms.map_or_else(|| free.features.clone(), |t| t.features.clone()),
    }))
}

/// Standings of every account with calls in `month`, read in pages of `page` accounts.
pub async fn month_standings(
    db: &sqlx::PgPool,
    month: Month,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
    page: i64,
) -> Result<Vec<Standing>, sqlx::Error> {
    let mut out = Vec::new();
    month_standing_pages(db, month, now, free_monthly_calls, page, |standings| {
        out.extend(standings);
        true
    })
    .await?;
    Ok(out)
}

/// Reads the standings of the accounts with calls in `month` in pages of `page`
/// accounts, in account order, handing each page to `each` until it returns `false` or
/// the accounts run out.
pub async fn month_standing_pages(
    db: &sqlx::PgPool,
    month: Month,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
    page: i64,
    mut each: impl FnMut(Vec<Standing>) -> bool,
) -> Result<(), sqlx::Error> {
    let mut after = i64::MIN;
    loop {
        let mut conn = db.acquire().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT account_id FROM usage_counter
             WHERE month_start = $1 AND account_id > $2 ORDER BY account_id LIMIT $3",
        )
        .bind(month.start())
        .bind(after)
        .bind(page)
        .fetch_all(&mut *conn)
        .await?;
        let Some(last) = ids.last().copied() else {
            return Ok(());
        };
        if !each(standings(&mut conn, &ids, month, now, free_monthly_calls).await?) {
            return Ok(());
        }
        after = last;
    }
}
