//! Quota snapshots (`monthly_usage`) and the subscriptions they come from.
//!
//! A snapshot records what one subscription allows in one UTC month. The free grant
//! is written at signup for the signup month and lazily for later months; a paid
//! subscription's snapshot is written at activation and lazily for later months. All
//! writes are `ON CONFLICT DO NOTHING`, so racing writers end with exactly one row.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::rules::{Budget, Enforcement, FREE_PLAN, Subscription};
use crate::month::Month;

/// One snapshot to ensure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub account_id: i64,
    pub subscription_id: i64,
    pub month: Month,
    pub allowance: i64,
    pub is_free: bool,
}

impl Grant {
    /// The snapshot `sub` gets for `month` when none exists yet.
    pub fn for_month(sub: &Subscription, month: Month, free_monthly_calls: i64) -> Self {
        Self {
            account_id: sub.account_id,
            subscription_id: sub.id,
            month,
            allowance: sub.default_allowance(free_monthly_calls),
            is_free: sub.is_free(),
        }
    }
}

/// Creates the account's free subscription and, when metering, its first free grant.
pub async fn create_free_subscription(
    conn: &mut PgConnection,
    account_id: i64,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
    metering: bool,
) -> Result<Subscription, sqlx::Error> {
    let sub: Subscription = sqlx::query_as(
        "INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
         VALUES ($1, $2, $3, $4)
         RETURNING id, account_id, plan, monthly_allowance, starts_at, expires_at, daily_allowance, enforcement,
                   features, rate_per_second, rate_burst, minute_allowance, unit_price_micros,
                   spend_cap_day_micros, spend_cap_month_micros",
    )
    .bind(account_id)
    .bind(FREE_PLAN)
    .bind(now)
    .bind(free_monthly_calls)
    .fetch_one(&mut *conn)
    .await?;
    if metering {
        let grant = Grant::for_month(&sub, Month::containing(now), free_monthly_calls);
        ensure_snapshots(conn, &[grant]).await?;
    }
    Ok(sub)
}

/// Gives a free subscription to any of `account_ids` that has none (accounts older
/// than subscription tracking).
pub async fn ensure_free_subscriptions(
    conn: &mut PgConnection,
    account_ids: &[i64],
    free_monthly_calls: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
         SELECT a.id, $2, a.created_at, $3 FROM account a WHERE a.id = ANY($1)
         ON CONFLICT (account_id) WHERE plan = 'free' DO NOTHING",
    )
    .bind(account_ids)
    .bind(FREE_PLAN)
    .bind(free_monthly_calls)
    .execute(conn)
    .await?;
    Ok(())
}

/// A `subscription` row as [`load_subscriptions`] selects it, decoded by position: the
/// accountant reads one per account and batch, and decoding by column name costs a
/// hash lookup per field.
type SubscriptionRow = (
    i64,
    i64,
    String,
    i64,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    Option<i64>,
    String,
    Vec<String>,
    Option<i32>,
    Option<i32>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// Every subscription of `account_ids`, grouped by account.
pub async fn load_subscriptions(
    conn: &mut PgConnection,
    account_ids: &[i64],
) -> Result<HashMap<i64, Vec<Subscription>>, sqlx::Error> {
    let rows: Vec<SubscriptionRow> = sqlx::query_as(
        "SELECT id, account_id, plan, monthly_allowance, starts_at, expires_at, daily_allowance, enforcement,
                features, rate_per_second, rate_burst, minute_allowance, unit_price_micros,
                spend_cap_day_micros, spend_cap_month_micros
         FROM subscription WHERE account_id = ANY($1)",
    )
    .bind(account_ids)
    .fetch_all(conn)
    .await?;
    let mut by_account: HashMap<i64, Vec<Subscription>> = HashMap::new();
    for (
        id,
        account_id,
        plan,
        monthly_allowance,
        starts_at,
        expires_at,
        daily,
        enforcement,
        features,
        rate_per_second,
        rate_burst,
        minute_allowance,
        unit_price_micros,
        spend_cap_day_micros,
        spend_cap_month_micros,
    ) in rows
    {
        let sub = Subscription {
            id,
            account_id,
            plan,
            monthly_allowance,
            starts_at,
            expires_at,
            daily_allowance: daily,
            enforcement: Enforcement::try_from(enforcement).map_err(|e| {
                sqlx::Error::ColumnDecode {
                    index: "enforcement".to_owned(),
                    source: e.into(),
                }
            })?,
            features,
            rate_per_second,
            rate_burst,
            budget: Budget {
                minute_allowance,
                unit_price_micros,
                spend_cap_day_micros,
                spend_cap_month_micros,
            },
        };
        by_account.entry(account_id).or_default().push(sub);
    }
    Ok(by_account)
}

/// Writes the snapshots that do not exist yet; existing ones are left as they are.
pub async fn ensure_snapshots(
    conn: &mut PgConnection,
    grants: &[Grant],
) -> Result<(), sqlx::Error> {
    if grants.is_empty() {
        return Ok(());
    }
    let mut accounts = Vec::with_capacity(grants.len());
    let mut subs = Vec::with_capacity(grants.len());
    let mut months = Vec::with_capacity(grants.len());
    let mut allowances = Vec::with_capacity(grants.len());
    let mut free = Vec::with_capacity(grants.len());
    for g in grants {
        accounts.push(g.account_id);
        subs.push(g.subscription_id);
        months.push(g.month.start());
        allowances.push(g.allowance);
        free.push(g.is_free);
    }
    sqlx::query(
        "INSERT INTO monthly_usage (account_id, subscription_id, month_start, allowance, is_free)
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::bool[])
         ORDER BY 2, 3
         ON CONFLICT DO NOTHING",
    )
    .bind(accounts)
    .bind(subs)
    .bind(months)
    .bind(allowances)
    .bind(free)
    .execute(conn)
    .await?;
    Ok(())
}

/// Allowances recorded for `(subscription_id, month)` pairs; missing pairs are absent.
pub async fn load_snapshots(
    conn: &mut PgConnection,
    keys: &[(i64, Month)],
) -> Result<HashMap<(i64, Month), i64>, sqlx::Error> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let subs: Vec<i64> = keys.iter().map(|k| k.0).collect();
    let months: Vec<DateTime<Utc>> = keys.iter().map(|k| k.1.start()).collect();
    let rows: Vec<(i64, DateTime<Utc>, i64)> = sqlx::query_as(
        "SELECT m.subscription_id, m.month_start, m.allowance
         FROM monthly_usage m
         JOIN UNNEST($1::bigint[], $2::timestamptz[]) AS k(subscription_id, month_start)
           ON m.subscription_id = k.subscription_id AND m.month_start = k.month_start",
    )
    .bind(subs)
    .bind(months)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(sub, start, allowance)| ((sub, Month::containing(start)), allowance))
        .collect())
}

/// What `sub` allows in `month`: its snapshot when there is one, else its default.
pub fn allowance_of(
    sub: &Subscription,
    month: Month,
    snapshots: &HashMap<(i64, Month), i64>,
    free_monthly_calls: i64,
) -> i64 {
    snapshots
        .get(&(sub.id, month))
        .copied()
        .unwrap_or_else(|| sub.default_allowance(free_monthly_calls))
}
