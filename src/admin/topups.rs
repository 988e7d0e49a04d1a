//! `POST /admin/v1/accounts/{account_id}/grants`: one-off top-ups (SPEC §3.3, §6).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::handlers::{activation_error, parse_account_id};
use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody, JsonBody, PathParams};
use crate::month::storable;
use crate::state::AppState;

/// Largest top-up at once.
pub(crate) const MAX_CALLS: i64 = 1_000_000_000_000;

/// Unknown fields are refused, as for subscriptions.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// Units of credit, 1 to 10^12.
    #[serde(deserialize_with = "crate::json_number::whole")]
    #[schema(minimum = 1, maximum = 1_000_000_000_000_i64)]
    pub calls: i64,
    /// When the credit lapses (exclusive); `null` for never.
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GrantCreated {
    pub grant_id: i64,
    pub calls: i64,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Refuses a top-up of `calls` outside 1 to 10^12, or lapsing at or before `now`;
/// shared by the admin API and the console's form.
pub(crate) fn validate_grant(req: &GrantRequest, now: DateTime<Utc>) -> Result<(), ApiError> {
    if !(1..=MAX_CALLS).contains(&req.calls) {
        return Err(ApiError::Validation(format!(
            "calls must be from 1 to {MAX_CALLS}"
        )));
    }
    if let Some(end) = req.expires_at
        && (!storable(end) || end <= now)
    {
        return Err(ApiError::Validation(
            "expires_at must be a real instant in the future".into(),
        ));
    }
    Ok(())
}

/// Adds top-up credit, spent once the month's allowance is used up.
#[utoipa::path(post, path = "/admin/v1/accounts/{account_id}/grants", tag = "admin",
    security(("admin" = [])),
    params(("account_id" = i64, Path)),
    request_body = GrantRequest,
    responses(
        (status = 201, description = "The top-up", body = GrantCreated),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND: no account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `calls` below 1, an unknown field, or `expires_at` not in the future", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn create_grant(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    PathParams(account_id): PathParams<String>,
    JsonBody(req): JsonBody<GrantRequest>,
) -> Result<(StatusCode, Json<GrantCreated>), ApiError> {
    let account_id = parse_account_id(&account_id)?;
    let now = Utc::now();
    validate_grant(&req, now)?;
    let topup = state
        .allocation
        .add_credit(account_id, req.calls, req.expires_at, now)
        .await
        .map_err(activation_error)?;
    Ok((
        StatusCode::CREATED,
        Json(GrantCreated {
            grant_id: topup.id,
            calls: topup.calls,
            expires_at: topup.expires_at,
        }),
    ))
}
