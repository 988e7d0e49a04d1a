//! The `?month=YYYY-MM` parameter every face takes, and the usage object (SPEC §3.4) of
//! the month it selects: the account API answers it to customers, the admin API to
//! operators, and the portal shows it.

use axum::Json;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::error::ApiError;
use crate::month::Month;
use crate::state::AppState;
use crate::usage::analytics::{AnalyticsQuery, AnalyticsReport, analytics};
use crate::usage::{self, UsageReport};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MonthQuery {
    /// `YYYY-MM`, from 1970-01 to 9999-11; the current UTC month when absent.
    #[param(value_type = String, required = false, pattern = "^(?!9999-12)(19[7-9][0-9]|[2-9][0-9]{3})-(0[1-9]|1[0-2])$", example = "2026-11")]
    pub month: Option<String>,
}

/// Parses `?month=`; the current month when absent. A month must start and end in years
/// 1 to 9999 (the range of every instant tollgate takes or shows), so that `month_start`
/// and `month_end` are RFC 3339: `9999-12` would end in year 10000.
pub fn month_or_current(query: &MonthQuery, now: DateTime<Utc>) -> Result<Month, ApiError> {
    match query.month.as_deref() {
        None => Ok(Month::containing(now)),
        Some(text) => text
            .parse()
            .map_err(|e: crate::month::ParseMonthError| ApiError::Validation(e.to_string())),
    }
}

/// The usage object of `account_id` for `?month=`.
pub async fn usage_response(
    state: &AppState,
    account_id: i64,
    query: &MonthQuery,
) -> Result<Json<UsageReport>, ApiError> {
    let now = Utc::now();
    let month = month_or_current(query, now)?;
    let mut conn = state.db.acquire().await?;
    usage::report::usage_report(
        &mut conn,
        account_id,
        month,
        now,
        state.config.usage.free_monthly_calls,
    )
    .await?
    .map(Json)
    .ok_or(ApiError::AccountNotFound)
}

/// Where a page of the list starts: after the account id a `next_cursor` named.
pub fn cursor_of(cursor: Option<&str>) -> Result<i64, ApiError> {
    match cursor {
        None | Some("") => Ok(0),
        // The document's pattern: up to 18 digits, so every cursor it allows parses.
        Some(c) if c.len() <= 18 && c.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(c.parse().expect("18 digits fit an i64"))
        }
        Some(_) => Err(ApiError::Validation(
            "cursor is not one this API gave (up to 18 digits)".into(),
        )),
    }
}

/// The search text, trimmed (none when empty); refused when, as given, it is too long to
/// be an email or holds a NUL (the document's `maxLength` and pattern).
pub fn search_of(q: Option<&str>) -> Result<Option<&str>, ApiError> {
    if q.is_some_and(|q| q.chars().count() > 254 || q.contains('\0')) {
        return Err(ApiError::Validation(
            "q must have at most 254 characters and no NUL".into(),
        ));
    }
    Ok(q.map(str::trim).filter(|q| !q.is_empty()))
}

/// An instant as a form field gives it, read as UTC: RFC 3339 with an offset, what a
/// `datetime-local` field sends (`YYYY-MM-DDTHH:MM`, seconds optional),
/// `YYYY-MM-DD HH:MM`, or a day (its midnight). `None` when it is none of these.
pub fn utc_instant(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(text, f).ok())
        .map(|at| at.and_utc())
        .or_else(|| {
            chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|day| day.and_hms_opt(0, 0, 0))
                .map(|at| at.and_utc())
        })
}

/// The analytics report of an account (SPEC §18) for a query, shared by the account
/// and admin APIs; `ACCOUNT_NOT_FOUND` for an unknown account.
pub async fn analytics_response(
    state: &AppState,
    account_id: i64,
    query: &AnalyticsQuery,
) -> Result<Json<AnalyticsReport>, ApiError> {
    let (from, to, group_by) = crate::usage::analytics::report::parse(query, Utc::now())?;
    let mut conn = state.db.acquire().await?;
    if !usage::report::account_exists(&mut conn, account_id).await? {
        return Err(ApiError::AccountNotFound);
    }
    Ok(Json(
        analytics(&mut conn, account_id, from, to, group_by).await?,
    ))
}

#[cfg(test)]
mod tests {
    use utoipa::OpenApi;

    use super::*;

    fn month(text: &str) -> Result<Month, ApiError> {
        let query = MonthQuery {
            month: Some(text.into()),
        };
        month_or_current(&query, Utc::now())
    }

    #[test]
    fn months_are_yyyy_mm_whose_bounds_rfc_3339_can_write() {
        assert_eq!(month("2026-11").unwrap().to_string(), "2026-11");
        assert_eq!(
            month("1970-01").unwrap().start().to_rfc3339(),
            "1970-01-01T00:00:00+00:00"
        );
        assert_eq!(
            month("9999-11").unwrap().end().to_rfc3339(),
            "9999-12-01T00:00:00+00:00"
        );
        for bad in [
            "9999-12", "0000-12", "0001-01", "1969-12", "2026-13", "2026-00", "2026-1", "",
            "+202-01",
        ] {
            assert!(matches!(month(bad), Err(ApiError::Validation(_))), "{bad}");
        }
    }

    /// The `month` pattern as `/openapi.json` states it, compiled once.
    fn documented_pattern() -> &'static fancy_regex::Regex {
        static PATTERN: std::sync::LazyLock<fancy_regex::Regex> = std::sync::LazyLock::new(|| {
            let doc = serde_json::to_value(crate::http::openapi::ApiDoc::openapi()).unwrap();
            crate::prop_support::pattern_at(
                &doc,
                "/paths/~1account~1v1~1usage/get/parameters/0/schema/pattern",
            )
        });
        &PATTERN
    }

    proptest::proptest! {
        /// The documented pattern is the handler's rule, in the engine the fuzz suite uses.
        #[test]
        fn prop_the_documented_month_pattern_is_the_handlers_rule(
            text in "[0-9+ -]{0,3}[0-9]{0,5}-?[0-9]{0,3}|[09]{4}-(0[0-9]|1[0-3])",
        ) {
            let matches = documented_pattern().is_match(&text).unwrap();
            proptest::prop_assert_eq!(matches, month(&text).is_ok(), "{:?}", text);
        }
    }

    #[test]
    fn no_month_is_the_current_one() {
        let now: DateTime<Utc> = "2026-02-28T23:59:59Z".parse().unwrap();
        let query = MonthQuery { month: None };
        assert_eq!(
            month_or_current(&query, now).unwrap().to_string(),
            "2026-02"
        );
    }
}
