//! `POST /admin/v1/reload` (SPEC §20): the operator's way to put a changed configuration
//! in force without a restart, like `SIGHUP`; what reloads and what waits for a restart
//! is [`crate::reload`]'s.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The configuration now in force.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Reloaded {
    /// 1 for the configuration loaded at start, one more for each reload that put a
    /// configuration in force.
    #[schema(minimum = 2)]
    pub generation: u64,
}

/// Reads the configuration layers again (the files and environment the process started
/// with) and puts the plan catalogue, pricing, entitlements, the free grant's features and
/// rate limit, the webhook thresholds and the log filter in force for every call and
/// activation from now on. Other changed settings wait for a restart (logged as a
/// warning). A configuration that does not load or validate changes nothing.
#[utoipa::path(post, path = "/admin/v1/reload", tag = "admin",
    security(("admin" = [])),
    responses(
        (status = 200, description = "The configuration read again is in force", body = Reloaded),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: the configuration does not load or validate; the message is the line `tollgate serve` would print, and the running configuration stays", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer (it keeps the admin token's failure counts)", body = ErrorBody),
    ))]
pub async fn reload(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
) -> Result<Json<Reloaded>, ApiError> {
    let generation = state
        .reloader
        .clone()
        .reload("admin API")
        .await
        .map_err(|refused| ApiError::Validation(refused.to_string()))?;
    Ok(Json(Reloaded { generation }))
}
