//! `GET /account/v1/analytics`: the caller's usage per day, route or key (SPEC §18).

use axum::Json;
use axum::extract::State;

use crate::auth::AccountPrincipal;
use crate::error::{ApiError, ErrorBody, QueryParams};
use crate::state::AppState;
use crate::usage::analytics::{AnalyticsQuery, AnalyticsReport};
use crate::web::params::analytics_response;

/// Calls, units, upstream errors and upstream latency percentiles of the caller's
/// account, per UTC day, route or key, over at most 93 days (this month by day when
/// nothing is asked). Once accounted, the sums equal the ledger's.
#[utoipa::path(get, path = "/account/v1/analytics", tag = "account",
    security(("session" = []), ("api_key" = [])),
    params(AnalyticsQuery),
    responses(
        (status = 200, description = "The report", body = AnalyticsReport),
        (status = 401, description = "UNAUTHORIZED: neither a valid session token nor a valid API key", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: a date is not YYYY-MM-DD, `to` is before `from`, the range spans more than 93 days, or `group_by` is not day, route or key", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn analytics(
    State(state): State<AppState>,
    principal: AccountPrincipal,
    QueryParams(query): QueryParams<AnalyticsQuery>,
) -> Result<Json<AnalyticsReport>, ApiError> {
    analytics_response(&state, principal.account_id, &query).await
}
