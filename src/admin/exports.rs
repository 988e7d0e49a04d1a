//! Usage export routes of the admin API (SPEC §14): the month's usage as streamed CSV,
//! and an account's Stripe meter export windows.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::handlers::parse_account_id;
use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody, PathParams, QueryParams};
use crate::export::{csv, windows};
use crate::state::AppState;
use crate::web::params::{MonthQuery, month_or_current};

/// Most windows per answer.
pub const MAX_WINDOWS: i64 = 200;
const DEFAULT_WINDOWS: i64 = 50;

/// Every account with usage in a UTC month, as CSV.
#[utoipa::path(get, path = "/admin/v1/usage/export", tag = "admin",
    security(("admin" = [])),
    params(MonthQuery),
    responses(
        (status = 200, description = "`text/csv`, streamed: the header row `account_id,email,plan,allowance,used,calls,credits_spent,month_start`, then one row per account with usage that month, in id order (RFC 4180 quoting, CRLF line ends)", content_type = "text/csv", body = String),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `month` is not `YYYY-MM` from 1970-01 to 9999-11", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn usage_export(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<MonthQuery>,
) -> Result<Response, ApiError> {
    let now = Utc::now();
    let month = month_or_current(&query, now)?;
    // A database that does not answer is a 503 now, not a body cut after the header.
    drop(state.db.acquire().await?);
    let rows = csv::stream(
        state.db.clone(),
        month,
        now,
        state.config.usage.free_monthly_calls,
    );
    let body = Body::from_stream(futures_util::StreamExt::map(rows, |page| {
        page.map_err(|e| {
            tracing::error!(error = %e, "usage export cut: the database failed mid-stream");
            e
        })
    }));
    let disposition = format!("attachment; filename=\"usage-{month}.csv\"");
    Ok((
        [
            (CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (CONTENT_DISPOSITION, disposition),
            (CACHE_CONTROL, "no-store".to_owned()),
        ],
        body,
    )
        .into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExportListQuery {
    /// 1 to 200 (default 50): the newest windows first.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ExportList {
    pub account_id: i64,
    /// Newest first.
    pub exports: Vec<ExportWindow>,
}

/// One Stripe meter event: the units the account accounted between `from` and `to`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ExportWindow {
    /// The meter event's `identifier`, the same on every attempt.
    pub identifier: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Units (`payload[value]`).
    pub value: i64,
    /// `pending` (being tried), `sent` (Stripe accepted it) or `failed` (Stripe refused
    /// it; its units go out again in the account's next window).
    pub status: String,
    /// The Stripe customer it was sent for.
    pub customer: String,
    pub attempts: i32,
    /// Stripe's message when refused, or why the last attempt failed while pending.
    pub error: Option<String>,
    /// When it was accepted or refused.
    pub finished_at: Option<DateTime<Utc>>,
}

/// An account's Stripe meter export windows.
#[utoipa::path(get, path = "/admin/v1/accounts/{account_id}/exports", tag = "admin",
    security(("admin" = [])),
    params(("account_id" = i64, Path), ExportListQuery),
    responses(
        (status = 200, description = "The account's export windows, newest first", body = ExportList),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND: no account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `limit` is not 1 to 200", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn account_exports(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    PathParams(account_id): PathParams<String>,
    QueryParams(query): QueryParams<ExportListQuery>,
) -> Result<Json<ExportList>, ApiError> {
    let account_id = parse_account_id(&account_id)?;
    let limit = query.limit.unwrap_or(DEFAULT_WINDOWS);
    if !(1..=MAX_WINDOWS).contains(&limit) {
        return Err(ApiError::Validation(format!(
            "limit must be from 1 to {MAX_WINDOWS}"
        )));
    }
    let mut conn = state.db.acquire().await?;
    if !crate::usage::report::account_exists(&mut conn, account_id).await? {
        return Err(ApiError::AccountNotFound);
    }
    let listed = windows::list(&mut conn, account_id, limit).await?;
    Ok(Json(ExportList {
        account_id,
        exports: listed
            .into_iter()
            .map(|w| ExportWindow {
                value: w.units_to - w.units_from,
                identifier: w.identifier,
                from: w.from_at,
                to: w.to_at,
                status: w.status,
                customer: w.customer,
                attempts: w.attempts,
                error: w.last_error,
                finished_at: w.finished_at,
            })
            .collect(),
    }))
}
