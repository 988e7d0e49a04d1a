//! `GET /account/v1/audit`: the account's own audit events (SPEC §19), newest first, a
//! page at a time. Session only: an API key, which the log may show being made or
//! revoked, does not read it.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::audit::read::{checked_cursor, checked_limit};
use crate::audit::{AuditPage, Filter, page};
use crate::auth::SessionPrincipal;
use crate::error::{ApiError, ErrorBody, QueryParams};
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AccountAuditQuery {
    /// `next_cursor` of the previous page (digits; empty for the first page).
    #[param(pattern = "^[0-9]{0,18}$")]
    pub cursor: Option<String>,
    /// 1 to 200 (default 50).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    pub limit: Option<String>,
}

/// Lists the changes of the account's keys, subscriptions, top-ups and redemptions,
/// newest first: who made each (the account, an operator, a payment or the gateway),
/// when and from where.
#[utoipa::path(get, path = "/account/v1/audit", tag = "account",
    security(("session" = [])),
    params(AccountAuditQuery),
    responses(
        (status = 200, description = "A page of the account's events, newest first", body = AuditPage),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `limit` is not 1 to 200, or `cursor` is not one this API gave", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn list_audit(
    State(state): State<AppState>,
    session: SessionPrincipal,
    QueryParams(query): QueryParams<AccountAuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = checked_limit(query.limit.as_deref())?;
    let before = checked_cursor(query.cursor.as_deref())?;
    let filter = Filter {
        account_id: Some(session.account_id),
        action: None,
    };
    let mut conn = state.db.acquire().await?;
    Ok(Json(page(&mut conn, filter, before, limit).await?))
}
