//! Redemption codes (the `redemption_code` table, SPEC §11): a customer turns a code
//! into a subscription.
//!
//! The code is claimed with `UPDATE ... WHERE used_at IS NULL RETURNING`, and the
//! subscription `[now, now + months)` is activated through the allocation service in
//! the same transaction: of concurrent redemptions of one code exactly one wins, and a
//! code is never used without its subscription (nor the reverse), nor without its
//! audit row (`code.redeemed`, the customer's, naming the code's id and never the
//! code). Attempts count per account and per client address before they are tried, and
//! stay counted when they fail (unknown, used, expired); past the limit every attempt
//! is refused, even with a good code.

use std::net::IpAddr;

use chrono::{DateTime, Months, Utc};
use sqlx::PgPool;

use crate::audit::{Action, Origin};
use crate::auth::account_limits::AccountLimits;
use crate::auth::token::{REDEMPTION_CODE_PREFIX, TokenHash, plausible};
use crate::error::ApiError;
use crate::usage::rules::Enforcement;
use crate::usage::subscriptions::{Allocation, NewSubscription, SubscriptionCreated};

/// Redeems `code` for `account_id`: a subscription of its catalogue plan from `now` for
/// its months. The account API and the portal both call this.
pub async fn redeem(
    db: &PgPool,
    allocation: &Allocation,
    limits: &AccountLimits,
    account_id: i64,
    code: &str,
    ip: IpAddr,
    now: DateTime<Utc>,
) -> Result<SubscriptionCreated, ApiError> {
    let attempt = limits.redeem(account_id, ip, now).await?;
    let origin = Origin::account(ip);
    let result = claim(db, allocation, account_id, code.trim(), origin, now).await;
    if let Err(ApiError::CodeNotFound | ApiError::CodeUsed | ApiError::CodeExpired) = &result {
        limits.failed(attempt, now).await?;
        tracing::info!(account_id, "redemption refused");
    } else {
        limits.give_back(attempt, now).await?;
    }
    result
}

async fn claim(
    db: &PgPool,
    allocation: &Allocation,
    account_id: i64,
    code: &str,
    origin: Origin,
    now: DateTime<Utc>,
) -> Result<SubscriptionCreated, ApiError> {
    if !plausible(code, REDEMPTION_CODE_PREFIX) {
        return Err(ApiError::CodeNotFound);
    }
    let hash = TokenHash::of(code);
    let mut tx = db.begin().await?;
    let claimed = sqlx::query!(
        "UPDATE redemption_code SET used_at = $2, used_by = $3
         WHERE code_hash = $1 AND used_at IS NULL AND (expires_at IS NULL OR expires_at > $2)
         RETURNING id, plan, monthly_allowance, daily_allowance, enforcement, months",
        hash.as_bytes(),
        now,
        account_id,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(claimed) = claimed else {
        let found = sqlx::query_scalar!(
            "SELECT used_at FROM redemption_code WHERE code_hash = $1",
            hash.as_bytes(),
        )
        .fetch_optional(&mut *tx)
        .await?;
        return Err(match found {
            None => ApiError::CodeNotFound,
            Some(Some(_)) => ApiError::CodeUsed,
            Some(None) => ApiError::CodeExpired,
        });
    };
    // The column's CHECK allows only what `Enforcement` reads.
    let enforcement = Enforcement::try_from(claimed.enforcement)
        .map_err(|why| ApiError::Internal(anyhow::anyhow!(why)))?;
    let expires_at = u32::try_from(claimed.months)
        .ok()
        .and_then(|m| now.checked_add_months(Months::new(m)))
        .filter(|t| crate::month::storable(*t))
        .ok_or_else(|| ApiError::Validation("the code's months run past year 9999".into()))?;
    let new = NewSubscription {
        monthly_allowance: claimed.monthly_allowance,
        starts_at: now,
        expires_at: Some(expires_at),
        daily_allowance: claimed.daily_allowance,
        enforcement,
        terms: allocation.catalogue_terms(&claimed.plan),
        plan: claimed.plan,
    };
    let cause = origin
        .cause(Action::CodeRedeemed)
        .with("code_id", claimed.id);
    let activated = allocation
        .activate_in(&mut tx, account_id, &new, &cause, now)
        .await?;
    sqlx::query!(
        "UPDATE redemption_code SET subscription_id = $1 WHERE id = $2",
        activated.subscription.id,
        claimed.id,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    allocation.settle(activated.standing.as_ref(), account_id, now);
    tracing::info!(account_id, code_id = claimed.id, "redemption code redeemed");
    Ok(activated.subscription.into())
}
