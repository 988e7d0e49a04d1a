//! `GET /admin/v1/accounts/{account_id}/analytics`: one account's usage per day, route
//! or key (SPEC §18), as its owner sees it.

use axum::Json;
use axum::extract::State;

use super::handlers::parse_account_id;
use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody, PathParams, QueryParams};
use crate::state::AppState;
use crate::usage::analytics::{AnalyticsQuery, AnalyticsReport};
use crate::web::params::analytics_response;

/// The account's calls, units, upstream errors and latency percentiles per UTC day,
/// route or key, over at most 93 days.
#[utoipa::path(get, path = "/admin/v1/accounts/{account_id}/analytics", tag = "admin",
    security(("admin" = [])),
    params(("account_id" = i64, Path), AnalyticsQuery),
    responses(
        (status = 200, description = "The report", body = AnalyticsReport),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND: no account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: a date is not YYYY-MM-DD, `to` is before `from`, the range spans more than 93 days, or `group_by` is not day, route or key", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn account_analytics(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    PathParams(account_id): PathParams<String>,
    QueryParams(query): QueryParams<AnalyticsQuery>,
) -> Result<Json<AnalyticsReport>, ApiError> {
    let account_id = parse_account_id(&account_id)?;
    analytics_response(&state, account_id, &query).await
}
