//! `POST /account/v1/redeem`: a customer turns a redemption code into a subscription
//! (SPEC §11).
//!
//! The code is claimed with `UPDATE ... WHERE used_at IS NULL RETURNING`, and the
//! subscription `[now, now + months)` is activated through the allocation service in
//! the same transaction: of concurrent redemptions of one code exactly one wins, and a
//! code is never used without its subscription (nor the reverse). Failed attempts
//! (unknown, used, expired) count toward the failed-attempt limit per account and per
//! client address; past it every attempt is refused, even with a good code.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Months, Utc};
use serde::Deserialize;
use utoipa::ToSchema;

use super::client::ClientIp;

use crate::auth::SessionPrincipal;
use crate::auth::token::{REDEMPTION_CODE_PREFIX, TokenHash, plausible};
use crate::error::{ApiError, ErrorBody, JsonBody};
use crate::state::AppState;
use crate::usage::rules::Enforcement;
use crate::usage::subscriptions::{NewSubscription, SubscriptionCreated};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedeemRequest {
    /// A code from `POST /admin/v1/codes` (`tgr_…`).
    pub code: String,
}

/// What a claimed code grants.
#[derive(Debug, sqlx::FromRow)]
struct Claimed {
    id: i64,
    plan: String,
    monthly_allowance: i64,
    daily_allowance: Option<i64>,
    #[sqlx(try_from = "String")]
    enforcement: Enforcement,
    months: i32,
}

/// Redeems a code: a subscription of its catalogue plan from now for its months.
#[utoipa::path(post, path = "/account/v1/redeem", tag = "account",
    security(("session" = [])),
    request_body = RedeemRequest,
    responses(
        (status = 201, description = "The new subscription", body = SubscriptionCreated),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 404, description = "CODE_NOT_FOUND: no such code", body = ErrorBody),
        (status = 409, description = "CODE_USED: the code was redeemed already", body = ErrorBody),
        (status = 410, description = "CODE_EXPIRED: the code is past its expires_at", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `code` is missing or not text", body = ErrorBody),
        (status = 429, description = "TOO_MANY_REQUESTS: too many failed attempts of this account or address", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn redeem(
    State(state): State<AppState>,
    session: SessionPrincipal,
    ClientIp(ip): ClientIp,
    JsonBody(req): JsonBody<RedeemRequest>,
) -> Result<(StatusCode, Json<SubscriptionCreated>), ApiError> {
    let account_id = session.account_id;
    let now = Utc::now();
    let attempt = state.limits.redeem(account_id, ip, now).await?;
    let result = redeem_code(&state, account_id, req.code.trim(), now).await;
    if let Err(ApiError::CodeNotFound | ApiError::CodeUsed | ApiError::CodeExpired) = &result {
        state.limits.failed(attempt, now).await?;
        tracing::info!(account_id, "redemption refused");
    } else {
        state.limits.succeeded(attempt, now).await?;
    }
    result.map(|created| (StatusCode::CREATED, Json(created)))
}

async fn redeem_code(
    state: &AppState,
    account_id: i64,
    code: &str,
    now: DateTime<Utc>,
) -> Result<SubscriptionCreated, ApiError> {
    if !plausible(code, REDEMPTION_CODE_PREFIX) {
        return Err(ApiError::CodeNotFound);
    }
    let hash = TokenHash::of(code);
    let mut tx = state.db.begin().await?;
    let claimed: Option<Claimed> = sqlx::query_as(
        "UPDATE redemption_code SET used_at = $2, used_by = $3
         WHERE code_hash = $1 AND used_at IS NULL AND (expires_at IS NULL OR expires_at > $2)
         RETURNING id, plan, monthly_allowance, daily_allowance, enforcement, months",
    )
    .bind(hash.as_bytes())
    .bind(now)
    .bind(account_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(claimed) = claimed else {
        let found: Option<Option<DateTime<Utc>>> =
            sqlx::query_scalar("SELECT used_at FROM redemption_code WHERE code_hash = $1")
                .bind(hash.as_bytes())
                .fetch_optional(&mut *tx)
                .await?;
        return Err(match found {
            None => ApiError::CodeNotFound,
            Some(Some(_)) => ApiError::CodeUsed,
            Some(None) => ApiError::CodeExpired,
        });
    };
    let expires_at = u32::try_from(claimed.months)
        .ok()
        .and_then(|m| now.checked_add_months(Months::new(m)))
        .filter(|t| crate::month::storable(*t))
        .ok_or_else(|| ApiError::Validation("the code's months run past year 9999".into()))?;
    let new = NewSubscription {
        plan: claimed.plan,
        monthly_allowance: claimed.monthly_allowance,
        starts_at: now,
        expires_at: Some(expires_at),
        daily_allowance: claimed.daily_allowance,
        enforcement: claimed.enforcement,
    };
    let activated = state
        .allocation
        .activate_in(&mut tx, account_id, &new, now)
        .await?;
    sqlx::query("UPDATE redemption_code SET subscription_id = $1 WHERE id = $2")
        .bind(activated.subscription.id)
        .bind(claimed.id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    state
        .allocation
        .settle(activated.standing.as_ref(), account_id, now);
    tracing::info!(account_id, code_id = claimed.id, "redemption code redeemed");
    Ok(activated.subscription.into())
}
