//! `POST /account/v1/redeem`: a customer turns a redemption code into a subscription
//! (SPEC §11), through [`crate::accounts::codes`].

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::Utc;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::web::client::ClientIp;

use crate::accounts::codes::redeem as redeem_code;
use crate::auth::SessionPrincipal;
use crate::error::{ApiError, ErrorBody, JsonBody};
use crate::state::AppState;
use crate::usage::subscriptions::SubscriptionCreated;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedeemRequest {
    /// A code from `POST /admin/v1/codes` (`tgr_…`).
    pub code: String,
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
    let created = redeem_code(
        &state.db,
        &state.allocation,
        &state.limits,
        session.account_id,
        &req.code,
        ip,
        Utc::now(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(created)))
}
