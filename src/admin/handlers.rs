//! Handlers of the admin API.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::account::usage::{MonthQuery, usage_response};
use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ErrorBody, JsonBody, PathParams, QueryParams};
use crate::state::AppState;
use crate::throttle::ReconcileReport;
use crate::usage::UsageReport;
use crate::usage::reconcile::{ReconcileError, reconcile_markers};
use crate::usage::rules::{Enforcement, FREE_PLAN};
use crate::usage::subscriptions::{ActivationError, NewSubscription};

pub(crate) const MAX_PLAN_CHARS: usize = 64;

/// Unknown fields are refused: a misspelt `expires_at` must not silently become an
/// open-ended subscription.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionRequest {
    /// Free text of 1 to 64 characters, none of them a control character, once
    /// surrounding whitespace is trimmed; `free` (in any case) is reserved.
    // The pattern is `validate` as a regular expression: whitespace as Rust's `trim` sees
    // it, not `free`, 1 to 64 characters without a control character that neither start
    // nor end with whitespace, whitespace.
    #[schema(
        pattern = r"^[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*(?![Ff][Rr][Ee][Ee][\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$)[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000](?:[^\u0000-\u001f\u007f-\u009f]{0,62}[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000])?[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$",
        example = "pro"
    )]
    pub plan: String,
    #[schema(minimum = 0, example = 100000)]
    pub monthly_allowance: i64,
    /// RFC 3339, a real instant of years 1 to 9999 UTC (no leap second); defaults to now.
    #[schema(example = "2026-01-01T00:00:00Z")]
    pub starts_at: Option<DateTime<Utc>>,
    /// Exclusive, after `starts_at`, same range; `null` or absent for open-ended.
    #[schema(example = "2027-01-01T00:00:00Z")]
    pub expires_at: Option<DateTime<Utc>>,
    /// A second cap per UTC day (units); `null` (the default) for none.
    #[serde(default)]
    pub daily_allowance: Option<i64>,
    /// `soft` (the default) or `hard`.
    #[serde(default)]
    pub enforcement: Enforcement,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionCreated {
    #[schema(minimum = 1)]
    pub subscription_id: i64,
    #[schema(minimum = 1)]
    pub account_id: i64,
    /// As given, surrounding whitespace trimmed.
    pub plan: String,
    #[schema(minimum = 0)]
    pub monthly_allowance: i64,
    pub starts_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub daily_allowance: Option<i64>,
    pub enforcement: Enforcement,
}

/// An id that is not a number names no account.
pub(super) fn parse_account_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse().map_err(|_| ApiError::AccountNotFound)
}

fn validate(req: SubscriptionRequest, now: DateTime<Utc>) -> Result<NewSubscription, ApiError> {
    let plan = req.plan.trim().to_owned();
    if plan.is_empty()
        || plan.chars().count() > MAX_PLAN_CHARS
        || plan.chars().any(char::is_control)
    {
        return Err(ApiError::Validation(format!(
            "plan must have 1 to {MAX_PLAN_CHARS} printable characters"
        )));
    }
    if plan.eq_ignore_ascii_case(FREE_PLAN) {
        return Err(ApiError::Validation("plan `free` is reserved".into()));
    }
    if req.monthly_allowance < 0 {
        return Err(ApiError::Validation(
            "monthly_allowance must not be negative".into(),
        ));
    }
    if req.daily_allowance.is_some_and(|d| d < 0) {
        return Err(ApiError::Validation(
            "daily_allowance must not be negative".into(),
        ));
    }
    let starts_at = req.starts_at.unwrap_or(now);
    if !crate::month::storable(starts_at)
        || req.expires_at.is_some_and(|t| !crate::month::storable(t))
    {
        return Err(ApiError::Validation(
            "starts_at and expires_at must be real instants of years 1 to 9999 (no leap second)"
                .into(),
        ));
    }
    if req.expires_at.is_some_and(|end| end <= starts_at) {
        return Err(ApiError::Validation(
            "expires_at must be after starts_at".into(),
        ));
    }
    Ok(NewSubscription {
        plan,
        monthly_allowance: req.monthly_allowance,
        starts_at,
        expires_at: req.expires_at,
        daily_allowance: req.daily_allowance,
        enforcement: req.enforcement,
    })
}

/// Activates a paid subscription and writes its current-month snapshot.
#[utoipa::path(post, path = "/admin/v1/accounts/{account_id}/subscriptions", tag = "admin",
    security(("admin" = [])),
    params(("account_id" = i64, Path)),
    request_body = SubscriptionRequest,
    responses(
        (status = 201, description = "The subscription, active from `starts_at`", body = SubscriptionCreated),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND: no account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: a field is missing, unknown, of the wrong type or breaks its constraints, or `expires_at` is not after `starts_at`", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn create_subscription(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    PathParams(account_id): PathParams<String>,
    JsonBody(req): JsonBody<SubscriptionRequest>,
) -> Result<(StatusCode, Json<SubscriptionCreated>), ApiError> {
    let account_id = parse_account_id(&account_id)?;
    let now = Utc::now();
    let new = validate(req, now)?;
    let activated = state
        .allocation
        .activate(account_id, &new, now)
        .await
        .map_err(|e| match e {
            ActivationError::AccountNotFound => ApiError::AccountNotFound,
            ActivationError::Database(e) => ApiError::from(e),
        })?;
    let sub = activated.subscription;
    Ok((
        StatusCode::CREATED,
        Json(SubscriptionCreated {
            subscription_id: sub.id,
            account_id: sub.account_id,
            plan: sub.plan,
            monthly_allowance: sub.monthly_allowance,
            starts_at: sub.starts_at,
            expires_at: sub.expires_at,
            daily_allowance: sub.daily_allowance,
            enforcement: sub.enforcement,
        }),
    ))
}

/// Any account's usage in a UTC month.
#[utoipa::path(get, path = "/admin/v1/accounts/{account_id}/usage", tag = "admin",
    security(("admin" = [])),
    params(("account_id" = i64, Path), MonthQuery),
    responses(
        (status = 200, description = "The account's usage object", body = UsageReport),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND: no account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `month` is not `YYYY-MM` from 1970-01 to 9999-11", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn account_usage(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
    PathParams(account_id): PathParams<String>,
    QueryParams(query): QueryParams<MonthQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    usage_response(&state, parse_account_id(&account_id)?, &query).await
}

/// Reconciles the current month's markers with PostgreSQL now.
#[utoipa::path(post, path = "/admin/v1/reconcile", tag = "admin",
    security(("admin" = [])),
    responses(
        (status = 200, description = "What the reconciliation did", body = ReconcileReport),
        (status = 401, description = "UNAUTHORIZED: missing or wrong admin token", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database or the marker store does not answer", body = ErrorBody),
    ))]
pub async fn reconcile(
    _admin: AdminPrincipal,
    State(state): State<AppState>,
) -> Result<Json<ReconcileReport>, ApiError> {
    reconcile_markers(
        &state.db,
        &state.throttler,
        state.config.usage.free_monthly_calls,
        Utc::now(),
    )
    .await
    .map(Json)
    .map_err(|e| match e {
        ReconcileError::Database(e) => ApiError::from(e),
        ReconcileError::Store(e) => ApiError::ServiceUnavailable(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(plan: &str, allowance: i64, expires: Option<&str>) -> SubscriptionRequest {
        SubscriptionRequest {
            plan: plan.into(),
            monthly_allowance: allowance,
            starts_at: Some("2026-11-01T00:00:00Z".parse().unwrap()),
            expires_at: expires.map(|e| e.parse().unwrap()),
            daily_allowance: None,
            enforcement: Enforcement::Soft,
        }
    }

    #[test]
    fn a_leap_second_start_is_a_validation_error() {
        let mut leap = req("pro", 10, None);
        leap.starts_at = Some("2016-12-31T23:59:60Z".parse().unwrap());
        assert!(matches!(
            validate(leap, Utc::now()),
            Err(ApiError::Validation(_))
        ));
    }

    #[test]
    fn the_free_plan_name_is_reserved_in_any_case() {
        assert!(validate(req("Free", 10, None), Utc::now()).is_err());
        assert!(validate(req("pro", 10, None), Utc::now()).is_ok());
    }

    #[test]
    fn negative_allowances_and_empty_intervals_are_refused() {
        assert!(validate(req("pro", -1, None), Utc::now()).is_err());
        assert!(validate(req("pro", 10, Some("2026-11-01T00:00:00Z")), Utc::now()).is_err());
        assert!(validate(req("  ", 10, None), Utc::now()).is_err());
    }
}

/// The documented plan pattern is `validate`'s rule, checked with the engine the fuzz
/// suite validates with.
#[cfg(test)]
mod prop_tests {
    use proptest::prelude::*;
    use utoipa::PartialSchema;

    use super::*;

    /// The pattern as `/openapi.json` states it, compiled once.
    fn documented_pattern() -> &'static fancy_regex::Regex {
        static PATTERN: std::sync::LazyLock<fancy_regex::Regex> = std::sync::LazyLock::new(|| {
            let schema = serde_json::to_value(SubscriptionRequest::schema()).unwrap();
            fancy_regex::Regex::new(schema["properties"]["plan"]["pattern"].as_str().unwrap())
                .unwrap()
        });
        &PATTERN
    }

    /// Whitespace of every kind Rust's `trim` knows, and two it does not.
    fn space() -> impl Strategy<Value = char> {
        prop::sample::select(vec![
            ' ', '\t', '\n', '\r', '\u{b}', '\u{c}', '\u{85}', '\u{a0}', '\u{1680}', '\u{2000}',
            '\u{200a}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}', '\u{feff}',
            '\u{200b}',
        ])
    }

    fn plan_char() -> impl Strategy<Value = char> {
        prop_oneof![
            8 => prop::sample::select(vec!['p', 'R', 'o', 'f', 'F', 'r', 'e', 'E', '-', 'é', 'İ']),
            2 => space(),
            1 => prop::sample::select(vec!['\0', '\u{1}', '\u{1f}', '\u{7f}', '\u{9f}']),
            1 => any::<char>(),
        ]
    }

    fn plan_like() -> impl Strategy<Value = String> {
        let pad = || prop::collection::vec(space(), 0..3).prop_map(String::from_iter);
        let core = prop_oneof![
            prop::sample::select(vec!["free", "FREE", "fRee", "pro", "x"]).prop_map(str::to_owned),
            prop::collection::vec(plan_char(), 0..8).prop_map(String::from_iter),
            (1..=MAX_PLAN_CHARS + 2).prop_map(|n| "p".repeat(n)),
            (1..=MAX_PLAN_CHARS + 2).prop_map(|n| format!("é{}é", " ".repeat(n))),
        ];
        (pad(), core, pad()).prop_map(|(a, b, c)| format!("{a}{b}{c}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn the_documented_plan_pattern_is_the_handlers_rule(plan in plan_like()) {
            let pattern = documented_pattern();
            let request = SubscriptionRequest {
                plan: plan.clone(),
                monthly_allowance: 10,
                starts_at: None,
                expires_at: None,
                daily_allowance: None,
                enforcement: Enforcement::Soft,
            };
            prop_assert_eq!(
                pattern.is_match(&plan).unwrap(),
                validate(request, Utc::now()).is_ok(),
                "{:?}",
                plan
            );
        }
    }
}
