//! Operators' reads (SPEC §3.3): the account list of the current month and one
//! account's usage per UTC day. The operator console is built on them.

use axum::Json;
use axum::extract::State;
use chrono::{NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::handlers::parse_account_id;
use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody, PathParams, QueryParams};
use crate::state::AppState;
use crate::usage::series;
use crate::web::params::{MonthQuery, month_or_current};
use crate::web::params::{cursor_of, search_of};

/// Most accounts per page.
pub const MAX_LIMIT: i64 = 200;
const DEFAULT_LIMIT: i64 = 50;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AccountListQuery {
    /// A part of the email, or an account id: at most 254 characters, no NUL.
    #[param(max_length = 254, pattern = r"^[^\u0000]*$")]
    pub q: Option<String>,
    /// `true`: only accounts with nothing left this month.
    pub exhausted: Option<bool>,
    /// 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page (digits; empty for the first page).
    #[param(pattern = "^[0-9]{0,18}$")]
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AccountSummary {
    pub account_id: i64,
    pub email: String,
    pub plan: String,
    pub used: i64,
    pub allowance: i64,
    pub exhausted: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AccountList {
    pub accounts: Vec<AccountSummary>,
    /// Pass as `cursor` for the next page; `null` on the last one.
    pub next_cursor: Option<String>,
}

/// Lists accounts with their current month, in id order.
#[utoipa::path(get, path = "/admin/v1/accounts", tag = "admin",
    security(("admin" = [])),
    params(AccountListQuery),
    responses(
        (status = 200, description = "A page of accounts, in id order", body = AccountList),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `limit` is not 1 to 200, or `cursor` is not one this API gave", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn list_accounts(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    QueryParams(query): QueryParams<AccountListQuery>,
) -> Result<Json<AccountList>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::Validation(format!(
            "limit must be from 1 to {MAX_LIMIT}"
        )));
    }
    let after = cursor_of(query.cursor.as_deref())?;
    let q = search_of(query.q.as_deref())?;
    let mut conn = state.db.acquire().await?;
    let page = series::accounts(
        &mut conn,
        q,
        query.exhausted.unwrap_or(false),
        after,
        limit,
        Utc::now(),
        state.config.usage.free_monthly_calls,
    )
    .await?;
    Ok(Json(AccountList {
        accounts: page
            .accounts
            .into_iter()
            .map(|row| AccountSummary {
                account_id: row.account_id,
                exhausted: row.standing.exhausted(),
                email: row.email,
                plan: row.standing.plan,
                used: row.standing.used,
                allowance: row.standing.allowance,
            })
            .collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DailyUsage {
    pub account_id: i64,
    pub days: Vec<DayEntry>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DayEntry {
    /// The UTC day, `YYYY-MM-DD`.
    #[schema(value_type = String, format = Date)]
    pub day: NaiveDate,
    pub calls: i64,
    /// Units those calls cost.
    pub cost: i64,
}

/// One account's calls and units per UTC day of a month, up to today.
#[utoipa::path(get, path = "/admin/v1/accounts/{account_id}/usage/daily", tag = "admin",
    security(("admin" = [])),
    params(("account_id" = i64, Path), MonthQuery),
    responses(
        (status = 200, description = "One entry per UTC day of the month up to today", body = DailyUsage),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND: no account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `month` is not `YYYY-MM` from 1970-01 to 9999-11", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn daily_usage(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    PathParams(account_id): PathParams<String>,
    QueryParams(query): QueryParams<MonthQuery>,
) -> Result<Json<DailyUsage>, ApiError> {
    let account_id = parse_account_id(&account_id)?;
    let now = Utc::now();
    let month = month_or_current(&query, now)?;
    let mut conn = state.db.acquire().await?;
    if !crate::usage::report::account_exists(&mut conn, account_id).await? {
        return Err(ApiError::AccountNotFound);
    }
    let days = series::daily(&mut conn, account_id, month, now).await?;
    Ok(Json(DailyUsage {
        account_id,
        days: days
            .into_iter()
            .map(|d| DayEntry {
                day: d.day,
                calls: d.calls,
                cost: d.cost,
            })
            .collect(),
    }))
}
