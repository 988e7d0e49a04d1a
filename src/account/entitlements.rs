//! `GET /account/v1/entitlements`: what the caller's plan includes (SPEC §17).

use axum::Json;
use axum::extract::State;
use chrono::Utc;

use crate::auth::AccountPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use crate::usage::report::{EntitlementsReport, entitlements as entitlements_of};

/// The active subscription's plan and the features it includes: a call to a route that
/// needs a feature the plan lacks is refused with `403 FEATURE_NOT_IN_PLAN`.
#[utoipa::path(get, path = "/account/v1/entitlements", tag = "account",
    security(("session" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "The caller's plan and its features", body = EntitlementsReport),
        (status = 401, description = "UNAUTHORIZED: neither a valid session token nor a valid API key", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn entitlements(
    State(state): State<AppState>,
    principal: AccountPrincipal,
) -> Result<Json<EntitlementsReport>, ApiError> {
    let mut conn = state.db.acquire().await?;
    entitlements_of(
        &mut conn,
        principal.account_id,
        Utc::now(),
        state.config.usage.free_monthly_calls,
        &state.catalogue.free_terms(),
    )
    .await?
    .map(Json)
    .ok_or(ApiError::AccountNotFound)
}
