//! `GET /account/v1/usage`: the usage report of SPEC §3.4, for customers.

use axum::Json;
use axum::extract::State;

use crate::auth::AccountPrincipal;
use crate::error::{ApiError, ErrorBody, QueryParams};
use crate::state::AppState;
use crate::usage::UsageReport;
use crate::web::params::{MonthQuery, usage_response};

/// The caller's usage in a UTC month (SPEC §3.4).
#[utoipa::path(get, path = "/account/v1/usage", tag = "account",
    security(("session" = []), ("api_key" = [])),
    params(MonthQuery),
    responses(
        (status = 200, description = "The caller's usage object", body = UsageReport),
        (status = 401, description = "UNAUTHORIZED: neither a valid session token nor a valid API key", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `month` is not `YYYY-MM` from 0001-01 to 9999-11", body = ErrorBody),
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
