//! `POST /admin/v1/accounts/{account_id}/grants`: one-off top-ups (SPEC §3.3, §6).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::handlers::parse_account_id;
use crate::audit::Origin;
use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody, JsonBody, PathParams};
use crate::state::AppState;
use crate::usage::requests::{GrantRequest, validate_grant};
use crate::web::client::ClientIp;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GrantCreated {
    pub grant_id: i64,
    pub calls: i64,
    pub expires_at: Option<DateTime<Utc>>,
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
    ClientIp(ip): ClientIp,
    PathParams(account_id): PathParams<String>,
    JsonBody(req): JsonBody<GrantRequest>,
) -> Result<(StatusCode, Json<GrantCreated>), ApiError> {
    let account_id = parse_account_id(&account_id)?;
    let now = Utc::now();
    validate_grant(&req, now)?;
    let topup = state
        .allocation
        .add_credit(
            account_id,
            req.calls,
            req.expires_at,
            Origin::admin(ip),
            now,
        )
        .await
        .map_err(ApiError::from)?;
    Ok((
        StatusCode::CREATED,
        Json(GrantCreated {
            grant_id: topup.id,
            calls: topup.calls,
            expires_at: topup.expires_at,
        }),
    ))
}
