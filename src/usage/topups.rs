//! One-off top-ups (SPEC §6): credit an operator adds to an account, spent only once
//! the month's allowance is used up (see [`super::rules::spend_credits`]).

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::quota::{QuotaView, announce};
use super::report::standings;
use super::subscriptions::{ActivationError, apply_markers};
use crate::month::Month;
use crate::throttle::Throttler;

/// A stored top-up.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TopUp {
    pub id: i64,
    pub account_id: i64,
    pub calls: i64,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Adds `calls` units of credit valid until `expires_at` (or for ever). Like an
/// activation it takes the account's row lock, and an account that has units again
/// gets its markers removed at once.
#[tracing::instrument(skip_all, fields(account_id = account_id))]
#[allow(clippy::too_many_arguments)]
pub async fn add_credit(
    db: &PgPool,
    throttler: &Throttler,
    quota: &QuotaView,
    account_id: i64,
    calls: i64,
    expires_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
) -> Result<TopUp, ActivationError> {
    let mut tx = db.begin().await?;
    let found: Option<i64> = sqlx::query_scalar("SELECT id FROM account WHERE id = $1 FOR UPDATE")
        .bind(account_id)
        .fetch_optional(&mut *tx)
        .await?;
    if found.is_none() {
        return Err(ActivationError::AccountNotFound);
    }
    let topup: TopUp = sqlx::query_as(
        "INSERT INTO credit_grant (account_id, calls, remaining, expires_at) VALUES ($1, $2, $2, $3)
         RETURNING id, account_id, calls, expires_at",
    )
    .bind(account_id)
    .bind(calls)
    .bind(expires_at)
    .fetch_one(&mut *tx)
    .await?;
    let standing = standings(
        &mut tx,
        &[account_id],
        Month::containing(now),
        now,
        free_monthly_calls,
    )
    .await?
    .into_iter()
    .next();
    announce(&mut tx, quota.replica(), &[account_id]).await?;
    tx.commit().await?;
    quota.forget(&[account_id]);
    if let Some(standing) = &standing {
        apply_markers(throttler, standing, now);
    }
    tracing::info!(grant_id = topup.id, calls, "top-up added");
    Ok(topup)
}
