//! Handlers of the admin API.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;

use crate::audit::Origin;
use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody, JsonBody, PathParams, QueryParams};
use crate::state::AppState;
use crate::throttle::ReconcileReport;
use crate::usage::UsageReport;
use crate::usage::reconcile::{ReconcileError, reconcile_markers};
pub use crate::usage::requests::{SubscriptionRequest, validate};
use crate::usage::subscriptions::SubscriptionCreated;
use crate::web::client::ClientIp;
use crate::web::params::{MonthQuery, usage_response};

/// An id that is not a number names no account.
pub(super) fn parse_account_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse().map_err(|_| ApiError::AccountNotFound)
}

/// Activates a paid subscription and writes its current-month snapshot. A catalogue
/// plan's figures may be left out.
#[utoipa::path(post, path = "/admin/v1/accounts/{account_id}/subscriptions", tag = "admin",
    security(("admin" = [])),
    params(("account_id" = i64, Path)),
    request_body = SubscriptionRequest,
    responses(
        (status = 201, description = "The subscription, active from `starts_at`", body = SubscriptionCreated),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND: no account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: a field is missing, unknown, of the wrong type or breaks its constraints, or `expires_at` is not after `starts_at`", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn create_subscription(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    PathParams(account_id): PathParams<String>,
    JsonBody(req): JsonBody<SubscriptionRequest>,
) -> Result<(StatusCode, Json<SubscriptionCreated>), ApiError> {
    let account_id = parse_account_id(&account_id)?;
    let now = Utc::now();
    let new = validate(req, &state.catalogue.current(), now)?;
    let activated = state
        .allocation
        .activate(account_id, &new, Origin::admin(ip), now)
        .await
        .map_err(ApiError::from)?;
    Ok((StatusCode::CREATED, Json(activated.subscription.into())))
}

/// Any account's usage in a UTC month.
#[utoipa::path(get, path = "/admin/v1/accounts/{account_id}/usage", tag = "admin",
    security(("admin" = [])),
    params(("account_id" = i64, Path), MonthQuery),
    responses(
        (status = 200, description = "The account's usage object", body = UsageReport),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND: no account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `month` is not `YYYY-MM` from 1970-01 to 9999-11", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn account_usage(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    PathParams(account_id): PathParams<String>,
    QueryParams(query): QueryParams<MonthQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    usage_response(&state, parse_account_id(&account_id)?, &query).await
}

/// Reconciles the current month's markers with PostgreSQL now.
#[utoipa::path(post, path = "/admin/v1/reconcile", tag = "admin",
    security(("admin" = [])),
    responses(
        (status = 200, description = "What the reconciliation did", body = ReconcileReport),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database or the marker store does not answer", body = ErrorBody),
    ))]
pub async fn reconcile(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
) -> Result<Json<ReconcileReport>, ApiError> {
    reconcile_markers(
        &state.db,
        &state.throttler,
        state.config.usage.free_monthly_calls,
        Utc::now(),
    )
    .await
    .map(Json)
    .map_err(|e| match e {
        ReconcileError::Database(e) => ApiError::from(e),
        ReconcileError::Store(e) => ApiError::ServiceUnavailable(e.to_string()),
    })
}
