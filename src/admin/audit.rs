//! `GET /admin/v1/audit`: the audit log (SPEC §19), every account's changes or one
//! account's or one action's, newest first, a page at a time.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::audit::read::{checked_account_id, checked_action, checked_cursor, checked_limit};
use crate::audit::{Action, AuditPage, Filter, page};
use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody, QueryParams};
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this account's events (those of a deleted account included).
    #[param(value_type = Option<i64>)]
    pub account_id: Option<String>,
    /// Only events of this action.
    #[param(value_type = Option<Action>, inline)]
    pub action: Option<String>,
    /// `next_cursor` of the previous page (digits; empty for the first page).
    #[param(pattern = "^[0-9]{0,18}$")]
    pub cursor: Option<String>,
    /// 1 to 200 (default 50).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    pub limit: Option<String>,
}

/// Lists audit events, newest first: who changed which account's keys, subscriptions
/// and top-ups, when and from where.
#[utoipa::path(get, path = "/admin/v1/audit", tag = "admin",
    security(("admin" = [])),
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of events, newest first", body = AuditPage),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `limit` is not 1 to 200, `cursor` is not one this API gave, `action` is not an action recorded, or `account_id` is not an integer", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn list_audit(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = checked_limit(query.limit.as_deref())?;
    let before = checked_cursor(query.cursor.as_deref())?;
    let filter = Filter {
        account_id: checked_account_id(query.account_id.as_deref())?,
        action: checked_action(query.action.as_deref())?,
    };
    let mut conn = state.db.acquire().await?;
    Ok(Json(page(&mut conn, filter, before, limit).await?))
}
