//! What an operator asks for (SPEC §3.3, §6, §11): a new subscription, with a catalogue
//! plan's figures filled in, and a one-off top-up; each checked against the catalogue and
//! the instants tollgate can store. The admin API reads them as JSON, the console from
//! its forms; both activate through the allocation service.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::config::{PlanConfig, plan_name_problem};
use crate::error::ApiError;
use crate::month::storable;
use crate::plan::{Budget, PlanTerms, RateLimitInput, checked_features};
use crate::usage::rules::Enforcement;
use crate::usage::subscriptions::NewSubscription;

/// Unknown fields are refused: a misspelt `expires_at` must not silently become an
/// open-ended subscription. A `plan` naming a catalogue plan may leave out its figures
/// (each one left out is the catalogue's); a free-text plan needs `monthly_allowance`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionRequest {
    /// A catalogue plan, or free text of 1 to 64 characters once surrounding whitespace
    /// is trimmed: ASCII letters, digits, spaces and `. _ - + / : ( ) & # , '`, starting
    /// with a letter or digit; `free` (in any case) is reserved.
    // The pattern is `validate` as a regular expression: whitespace as Rust's `trim` sees
    // it, not `free`, a letter or digit, up to 63 more of the set ending in one that is
    // not a space, whitespace.
    #[schema(
        pattern = r"^[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*(?![Ff][Rr][Ee][Ee][\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$)[A-Za-z0-9](?:[A-Za-z0-9 ._+/:()&#,'-]{0,62}[A-Za-z0-9._+/:()&#,'-])?[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$",
        example = "pro"
    )]
    pub plan: String,
    /// Required unless `plan` names a catalogue plan.
    #[serde(default, deserialize_with = "crate::json_number::whole_or_null")]
    #[schema(minimum = 0, example = 100000)]
    pub monthly_allowance: Option<i64>,
    /// RFC 3339, a real instant of years 1 to 9999 UTC (no leap second); defaults to now.
    #[schema(example = "2026-01-01T00:00:00Z")]
    pub starts_at: Option<DateTime<Utc>>,
    /// Exclusive, after `starts_at`, same range; `null` or absent for open-ended.
    #[schema(example = "2027-01-01T00:00:00Z")]
    pub expires_at: Option<DateTime<Utc>>,
    /// A second cap per UTC day (units); `null` for none. Left out: the catalogue
    /// plan's, else none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub daily_allowance: Option<Option<i64>>,
    /// `soft` or `hard`. Left out: the catalogue plan's, else `soft`.
    #[serde(default)]
    pub enforcement: Option<Enforcement>,
    /// Calls per second and burst (SPEC §16); `null` for none. Left out: the catalogue
    /// plan's, else none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<RateLimitInput>)]
    pub rate_limit: Option<Option<RateLimitInput>>,
    /// The features this subscription includes (SPEC §17), at most 100 (repeats
    /// dropped), replacing the catalogue plan's. Left out or null: the catalogue plan's,
    /// else none.
    #[serde(default)]
    #[schema(value_type = Option<Vec<FeatureName>>, max_items = 100, example = json!(["synastry"]))]
    pub features: Option<Vec<String>>,
    /// Units per fixed minute, aligned to the epoch minute (SPEC §20); `null` for none.
    /// Left out: the catalogue plan's, else none.
    #[serde(default, deserialize_with = "present_whole")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub minute_allowance: Option<Option<i64>>,
    /// Micro-USD per unit; `null` for none. Left out: the catalogue plan's, else none.
    #[serde(default, deserialize_with = "present_whole")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub unit_price_micros: Option<Option<i64>>,
    /// The most a UTC day may cost, in micro-USD (needs a price); `null` for none. Left
    /// out: the catalogue plan's, else none.
    #[serde(default, deserialize_with = "present_whole")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub spend_cap_day_micros: Option<Option<i64>>,
    /// The most a UTC month may cost, in micro-USD (needs a price); `null` for none.
    /// Left out: the catalogue plan's, else none.
    #[serde(default, deserialize_with = "present_whole")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub spend_cap_month_micros: Option<Option<i64>>,
}

/// A whole number that is present, even as `null`, is `Some`; a missing one stays `None`.
fn present_whole<'de, D>(deserializer: D) -> Result<Option<Option<i64>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    crate::json_number::whole_or_null(deserializer).map(Some)
}

/// A feature a plan includes (SPEC §17): 1 to 64 of `a-z`, `0-9`, `_` and `-`.
// Only the document's: requests carry features as strings, checked by
// `checked_features`, whose rule the pattern states (held to it by a property test).
#[derive(ToSchema)]
#[schema(pattern = "^[a-z0-9_-]{1,64}$", example = "synastry")]
pub struct FeatureName(pub String);

/// A field that is present, even as `null`, is `Some`; a missing one stays `None`.
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// The subscription `req` asks for, with a catalogue plan's figures filled in; shared
/// by the admin API and the console's form.
pub fn validate(
    req: SubscriptionRequest,
    catalogue: &[PlanConfig],
    now: DateTime<Utc>,
) -> Result<NewSubscription, ApiError> {
    let plan = req.plan.trim().to_owned();
    if let Some(problem) = plan_name_problem(&plan) {
        return Err(ApiError::Validation(problem));
    }
    let listed = catalogue.iter().find(|p| p.name == plan);
    let Some(monthly_allowance) = req
        .monthly_allowance
        .or(listed.map(|p| p.monthly_allowance))
    else {
        return Err(ApiError::Validation(
            "monthly_allowance is required unless plan names a catalogue plan".into(),
        ));
    };
    let daily_allowance = match req.daily_allowance {
        Some(given) => given,
        None => listed.and_then(|p| p.daily_allowance),
    };
    let enforcement = req
        .enforcement
        .or(listed.map(|p| p.enforcement))
        .unwrap_or_default();
    if monthly_allowance < 0 {
        return Err(ApiError::Validation(
            "monthly_allowance must not be negative".into(),
        ));
    }
    if daily_allowance.is_some_and(|d| d < 0) {
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
    let rate_limit = match req.rate_limit {
        Some(Some(given)) => Some(given.checked("rate_limit").map_err(ApiError::Validation)?),
        Some(None) => None,
        None => listed.and_then(|p| p.terms().rate_limit),
    };
    let features = match req.features {
        Some(given) => checked_features(given, "features").map_err(ApiError::Validation)?,
        None => listed.map(|p| p.features.clone()).unwrap_or_default(),
    };
    let catalogue = listed.map(PlanConfig::budget).unwrap_or_default();
    let budget = Budget {
        minute_allowance: req.minute_allowance.unwrap_or(catalogue.minute_allowance),
        unit_price_micros: req.unit_price_micros.unwrap_or(catalogue.unit_price_micros),
        spend_cap_day_micros: req
            .spend_cap_day_micros
            .unwrap_or(catalogue.spend_cap_day_micros),
        spend_cap_month_micros: req
            .spend_cap_month_micros
            .unwrap_or(catalogue.spend_cap_month_micros),
    };
    budget.check().map_err(ApiError::Validation)?;
    Ok(NewSubscription {
        terms: PlanTerms {
            features,
            rate_limit,
            budget,
        },
        plan,
        monthly_allowance,
        starts_at,
        expires_at: req.expires_at,
        daily_allowance,
        enforcement,
    })
}

/// Largest top-up at once.
pub const MAX_CALLS: i64 = 1_000_000_000_000;

/// Unknown fields are refused, as for subscriptions.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// Units of credit, 1 to 10^12.
    #[serde(deserialize_with = "crate::json_number::whole")]
    #[schema(minimum = 1, maximum = 1_000_000_000_000_i64)]
    pub calls: i64,
    /// When the credit lapses (exclusive); `null` for never.
    pub expires_at: Option<DateTime<Utc>>,
}

/// Refuses a top-up of `calls` outside 1 to 10^12, or lapsing at or before `now`;
/// shared by the admin API and the console's form.
pub fn validate_grant(req: &GrantRequest, now: DateTime<Utc>) -> Result<(), ApiError> {
    if !(1..=MAX_CALLS).contains(&req.calls) {
        return Err(ApiError::Validation(format!(
            "calls must be from 1 to {MAX_CALLS}"
        )));
    }
    if let Some(end) = req.expires_at
        && (!storable(end) || end <= now)
    {
        return Err(ApiError::Validation(
            "expires_at must be a real instant in the future".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(plan: &str, allowance: i64, expires: Option<&str>) -> SubscriptionRequest {
        SubscriptionRequest {
            plan: plan.into(),
            monthly_allowance: Some(allowance),
            starts_at: Some("2026-11-01T00:00:00Z".parse().unwrap()),
            expires_at: expires.map(|e| e.parse().unwrap()),
            daily_allowance: None,
            enforcement: None,
            rate_limit: None,
            features: None,
            ..SubscriptionRequest::default()
        }
    }

    fn validate(req: SubscriptionRequest, now: DateTime<Utc>) -> Result<NewSubscription, ApiError> {
        super::validate(req, &[], now)
    }

    fn catalogue() -> Vec<PlanConfig> {
        vec![PlanConfig {
            name: "team".into(),
            monthly_allowance: 50_000,
            daily_allowance: Some(5_000),
            enforcement: Enforcement::Hard,
            price_id: None,
            checkout_url: None,
            features: vec![],
            rate_limit: None,
            ..PlanConfig::default()
        }]
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

    #[test]
    fn a_catalogue_plan_without_figures_takes_the_catalogues() {
        let body = r#"{"plan": "team"}"#;
        let req: SubscriptionRequest = serde_json::from_str(body).unwrap();
        let new = super::validate(req, &catalogue(), Utc::now()).unwrap();
        assert_eq!(
            (new.monthly_allowance, new.daily_allowance, new.enforcement),
            (50_000, Some(5_000), Enforcement::Hard)
        );
    }

    #[test]
    fn figures_given_for_a_catalogue_plan_win_and_null_daily_means_none() {
        let body = r#"{"plan": "team", "monthly_allowance": 7, "daily_allowance": null,
                       "enforcement": "soft"}"#;
        let req: SubscriptionRequest = serde_json::from_str(body).unwrap();
        let new = super::validate(req, &catalogue(), Utc::now()).unwrap();
        assert_eq!(
            (new.monthly_allowance, new.daily_allowance, new.enforcement),
            (7, None, Enforcement::Soft)
        );
    }

    #[test]
    fn a_free_text_plan_without_monthly_allowance_is_refused() {
        let req: SubscriptionRequest = serde_json::from_str(r#"{"plan": "bespoke"}"#).unwrap();
        assert!(matches!(
            super::validate(req, &catalogue(), Utc::now()),
            Err(ApiError::Validation(_))
        ));
    }
}

/// The documented plan pattern is `validate`'s rule, checked with the engine the fuzz
/// suite validates with.
#[cfg(test)]
mod prop_tests {
    use proptest::prelude::*;
    use utoipa::PartialSchema;

    use super::*;
    use crate::config::MAX_PLAN_CHARS;
    use crate::plan::MAX_FEATURE_CHARS;
    use crate::prop_support::{pattern_at, space};

    /// The pattern as `/openapi.json` states it, compiled once.
    fn documented_pattern() -> &'static fancy_regex::Regex {
        static PATTERN: std::sync::LazyLock<fancy_regex::Regex> = std::sync::LazyLock::new(|| {
            let schema = serde_json::to_value(SubscriptionRequest::schema()).unwrap();
            pattern_at(&schema, "/properties/plan/pattern")
        });
        &PATTERN
    }

    fn plan_char() -> impl Strategy<Value = char> {
        prop_oneof![
            8 => prop::sample::select(vec!['p', 'R', 'o', 'f', 'F', 'r', 'e', 'E', '-', 'é', 'İ', '7', '(', '\'', ' ', '.']),
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
            (1..=MAX_PLAN_CHARS + 2).prop_map(|n| format!("P{})", " ".repeat(n))),
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
                monthly_allowance: Some(10),
                starts_at: None,
                expires_at: None,
                daily_allowance: None,
                enforcement: None,
                rate_limit: None,
                features: None,
                ..SubscriptionRequest::default()
            };
            prop_assert_eq!(
                pattern.is_match(&plan).unwrap(),
                validate(request, &[], Utc::now()).is_ok(),
                "{:?}",
                plan
            );
        }

        #[test]
        fn the_documented_feature_pattern_is_the_handlers_rule(feature in feature_like()) {
            let pattern = feature_pattern();
            prop_assert_eq!(
                pattern.is_match(&feature).unwrap(),
                crate::plan::feature_problem(&feature).is_none(),
                "{:?}",
                feature
            );
        }
    }

    fn feature_pattern() -> &'static fancy_regex::Regex {
        static PATTERN: std::sync::LazyLock<fancy_regex::Regex> = std::sync::LazyLock::new(|| {
            let schema = serde_json::to_value(FeatureName::schema()).unwrap();
            pattern_at(&schema, "/pattern")
        });
        &PATTERN
    }

    fn feature_like() -> impl Strategy<Value = String> {
        let feature_char = prop_oneof![
            8 => prop::sample::select(vec!['a', 'z', '0', '9', '_', '-']),
            1 => prop::sample::select(vec!['A', ' ', '.', 'é', '\n', '\0']),
            1 => any::<char>(),
        ];
        prop_oneof![
            4 => prop::collection::vec(feature_char, 0..8).prop_map(String::from_iter),
            1 => (MAX_FEATURE_CHARS - 1..=MAX_FEATURE_CHARS + 1).prop_map(|n| "s".repeat(n)),
        ]
    }
}
