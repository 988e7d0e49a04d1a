//! The usage report of SPEC §3.4, for customers (and, through [`usage_response`], admins).

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::AccountPrincipal;
use crate::error::{ApiError, ErrorBody, QueryParams};
use crate::month::Month;
use crate::state::AppState;
use crate::usage::{self, UsageReport};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MonthQuery {
    /// `YYYY-MM`; the current UTC month when absent.
    #[param(value_type = String, required = false, pattern = "^[0-9]{4}-(0[1-9]|1[0-2])$", example = "2026-11")]
    pub month: Option<String>,
}

/// Parses `?month=`; the current month when absent.
pub fn month_or_current(query: &MonthQuery, now: DateTime<Utc>) -> Result<Month, ApiError> {
    match query.month.as_deref() {
        None => Ok(Month::containing(now)),
        Some(text) => text
            .parse()
            .map_err(|_| ApiError::Validation("month must be YYYY-MM".into())),
    }
}

/// The caller's usage in a UTC month (SPEC §3.4).
#[utoipa::path(get, path = "/account/v1/usage", tag = "account",
    security(("session" = []), ("api_key" = [])),
    params(MonthQuery),
    responses(
        (status = 200, description = "The caller's usage object", body = UsageReport),
        (status = 401, description = "UNAUTHORIZED: neither a valid session token nor a valid API key", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `month` is not `YYYY-MM`", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn usage(
    State(state): State<AppState>,
    principal: AccountPrincipal,
    QueryParams(query): QueryParams<MonthQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    usage_response(&state, principal.account_id, &query).await
}

/// The usage object of `account_id` for `?month=`; shared with the admin API.
pub(crate) async fn usage_response(
    state: &AppState,
    account_id: i64,
    query: &MonthQuery,
) -> Result<Json<UsageReport>, ApiError> {
    let now = Utc::now();
    let month = month_or_current(query, now)?;
    let mut conn = state.db.acquire().await?;
    usage::report::usage_report(
        &mut conn,
        account_id,
        month,
        now,
        state.config.usage.free_monthly_calls,
    )
    .await?
    .map(Json)
    .ok_or(ApiError::AccountNotFound)
}
