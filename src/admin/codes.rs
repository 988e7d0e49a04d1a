//! `POST /admin/v1/codes`: minting redemption codes for a catalogue plan (SPEC §11).
//!
//! A code is `tgr_` + 40 random alphanumerics, like an API key; only its SHA-256 is
//! stored, and the clear codes are in this one response. Each code row keeps the
//! plan's figures as they are now, so a later catalogue edit never changes what an
//! outstanding code grants.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::AdminPrincipal;
use crate::auth::token::{PlainToken, REDEMPTION_CODE_PREFIX};
use crate::config::PlanConfig;
use crate::error::{ApiError, ErrorBody, JsonBody};
use crate::month::storable;
use crate::state::AppState;

/// Most codes minted at once.
pub const MAX_COUNT: i64 = 1_000;
/// Longest subscription a code grants, in months (ten years).
pub const MAX_MONTHS: i64 = 120;

/// Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodesRequest {
    /// A catalogue plan.
    pub plan: String,
    /// Calendar months of subscription each code grants from its redemption, 1 to 120.
    #[serde(deserialize_with = "crate::json_number::whole")]
    #[schema(minimum = 1, maximum = 120)]
    pub months: i64,
    /// Codes to mint, 1 to 1000.
    #[serde(deserialize_with = "crate::json_number::whole")]
    #[schema(minimum = 1, maximum = 1000)]
    pub count: i64,
    /// When unredeemed codes stop working (exclusive, in the future); `null` or left
    /// out for never.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CodesCreated {
    /// The clear codes: shown this once, stored hashed.
    pub codes: Vec<String>,
    pub plan: String,
    pub months: i64,
    pub expires_at: Option<DateTime<Utc>>,
}

/// The catalogue plan `req` names, as the catalogue stands now, once `req` is valid.
fn validate(
    req: &CodesRequest,
    state: &AppState,
    now: DateTime<Utc>,
) -> Result<PlanConfig, ApiError> {
    let Some(plan) = state.catalogue.plan(&req.plan) else {
        return Err(ApiError::Validation(format!(
            "plan `{}` is not in the catalogue",
            req.plan
        )));
    };
    if !(1..=MAX_MONTHS).contains(&req.months) {
        return Err(ApiError::Validation(format!(
            "months must be from 1 to {MAX_MONTHS}"
        )));
    }
    if !(1..=MAX_COUNT).contains(&req.count) {
        return Err(ApiError::Validation(format!(
            "count must be from 1 to {MAX_COUNT}"
        )));
    }
    if req.expires_at.is_some_and(|t| !storable(t) || t <= now) {
        return Err(ApiError::Validation(
            "expires_at must be a real instant in the future, or null for never".into(),
        ));
    }
    Ok(plan)
}

/// Mints `count` single-use codes, each granting `months` of a catalogue plan.
#[utoipa::path(post, path = "/admin/v1/codes", tag = "admin",
    security(("admin" = [])),
    request_body = CodesRequest,
    responses(
        (status = 201, description = "The codes, shown this once", body = CodesCreated),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: not a catalogue plan, `months` or `count` out of range, or `expires_at` not in the future", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn create_codes(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    JsonBody(req): JsonBody<CodesRequest>,
) -> Result<(StatusCode, Json<CodesCreated>), ApiError> {
    let now = Utc::now();
    let plan = validate(&req, &state, now)?;
    let codes: Vec<PlainToken> = (0..req.count)
        .map(|_| PlainToken::generate(REDEMPTION_CODE_PREFIX))
        .collect();
    let hashes: Vec<Vec<u8>> = codes.iter().map(|c| c.hash().as_bytes().to_vec()).collect();
    sqlx::query(
        "INSERT INTO redemption_code
             (code_hash, plan, monthly_allowance, daily_allowance, enforcement, months, expires_at)
         SELECT h, $2, $3, $4, $5, $6, $7 FROM UNNEST($1::bytea[]) AS h",
    )
    .bind(&hashes)
    .bind(&plan.name)
    .bind(plan.monthly_allowance)
    .bind(plan.daily_allowance)
    .bind(plan.enforcement.as_str())
    .bind(req.months as i32)
    .bind(req.expires_at)
    .execute(&state.db)
    .await?;
    tracing::info!(plan = %plan.name, count = req.count, months = req.months, "redemption codes minted");
    Ok((
        StatusCode::CREATED,
        Json(CodesCreated {
            codes: codes.into_iter().map(PlainToken::reveal).collect(),
            plan: plan.name,
            months: req.months,
            expires_at: req.expires_at,
        }),
    ))
}
