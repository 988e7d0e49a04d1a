//! The plan catalogue (`[[plans]]`) and the payment section (`[billing]`), SPEC §2 and §11.
//!
//! A catalogue plan is a named set of figures customers can see, operators can grant
//! by name, redemption codes are minted for, and payment events activate (by name, or
//! by the payment provider's `price_id`). The rules a plan name follows are the admin
//! API's, so a catalogue name is always a valid subscription plan.

use std::collections::HashSet;

use secrecy::SecretString;
use serde::Deserialize;

use super::de::lenient;
use crate::plan::{Budget, Enforcement, FREE_PLAN, PlanTerms, RateLimitInput, checked_features};

/// Longest plan name, in characters.
pub const MAX_PLAN_CHARS: usize = 64;

/// One `[[plans]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    pub name: String,
    #[serde(deserialize_with = "lenient")]
    pub monthly_allowance: i64,
    /// A second cap per UTC day; none when absent.
    #[serde(default)]
    pub daily_allowance: Option<i64>,
    #[serde(default)]
    pub enforcement: Enforcement,
    /// The payment provider's price (Stripe `price_…`) that pays for this plan.
    #[serde(default)]
    pub price_id: Option<String>,
    /// The payment provider's hosted checkout page for this plan (a Stripe payment
    /// link); the customer portal links to it with `client_reference_id` appended
    /// (SPEC §12). An `http` or `https` URL.
    #[serde(default)]
    pub checkout_url: Option<String>,
    /// The features the plan includes (SPEC §17); `entitlements.routes` says which
    /// routes need which.
    #[serde(default)]
    pub features: Vec<String>,
    /// Calls per second and burst (SPEC §16); none when absent.
    #[serde(default)]
    pub rate_limit: Option<RateLimitInput>,
    /// Units per fixed minute (SPEC §20); none when absent.
    #[serde(default)]
    pub minute_allowance: Option<i64>,
    /// Micro-USD per unit (SPEC §20); none when absent.
    #[serde(default)]
    pub unit_price_micros: Option<i64>,
    /// The most a UTC day may cost, in micro-USD; none when absent.
    #[serde(default)]
    pub spend_cap_day_micros: Option<i64>,
    /// The most a UTC month may cost, in micro-USD; none when absent.
    #[serde(default)]
    pub spend_cap_month_micros: Option<i64>,
}

impl PlanConfig {
    /// The plan's features, rate limit and budget (checked when the configuration
    /// loaded).
    pub fn terms(&self) -> PlanTerms {
        PlanTerms {
            features: self.features.clone(),
            rate_limit: self.rate_limit.and_then(|r| r.checked("rate_limit").ok()),
            budget: self.budget(),
        }
    }

    /// The plan's minute window, price and spend caps (SPEC §20).
    pub fn budget(&self) -> Budget {
        Budget {
            minute_allowance: self.minute_allowance,
            unit_price_micros: self.unit_price_micros,
            spend_cap_day_micros: self.spend_cap_day_micros,
            spend_cap_month_micros: self.spend_cap_month_micros,
        }
    }

    /// The checkout page of this plan for `account_id`: `checkout_url` with
    /// `client_reference_id=<account_id>` added to its query (replacing any there), so
    /// the payment webhook of SPEC §11 knows whose payment it is. None without one.
    pub fn checkout_link(&self, account_id: i64) -> Option<String> {
        let mut url = reqwest::Url::parse(self.checkout_url.as_deref()?).ok()?;
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| k != CLIENT_REFERENCE)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        url.query_pairs_mut()
            .clear()
            .extend_pairs(kept)
            .append_pair(CLIENT_REFERENCE, &account_id.to_string());
        Some(url.into())
    }
}

/// The query parameter by which a hosted checkout names the paying account.
const CLIENT_REFERENCE: &str = "client_reference_id";

/// Why `url` cannot be a checkout page: it must be an absolute `http` or `https` URL
/// with a host, no credentials, at most 2,048 bytes.
fn checkout_url_problem(url: &str) -> Option<&'static str> {
    if url.len() > 2048 {
        return Some("checkout_url is longer than 2048 bytes");
    }
    match reqwest::Url::parse(url) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some_and(|h| !h.is_empty())
                && u.username().is_empty()
                && u.password().is_none() =>
        {
            None
        }
        _ => Some("checkout_url must be an http(s) URL with a host and no credentials"),
    }
}

/// `[billing]`: payment webhooks and the Stripe meter export (SPEC §11, §14).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BillingConfig {
    /// The endpoint's signing secret (`whsec_…`); unset or blank = `/billing/v1/stripe`
    /// absent.
    pub stripe_webhook_secret: Option<SecretString>,
    /// The Stripe secret key meter events are sent with; with `meter_event_name`, the
    /// meter export is on.
    pub stripe_api_key: Option<SecretString>,
    /// The Stripe meter's `event_name`.
    pub meter_event_name: Option<String>,
    /// Seconds between an account's exports (≥ 1).
    #[serde(deserialize_with = "lenient")]
    pub meter_interval_s: u64,
    /// Where Stripe's API is; tests point it at a local server.
    pub stripe_api_base: String,
    /// Bound of one meter event request, connection included.
    #[serde(deserialize_with = "lenient")]
    pub meter_timeout_ms: u64,
    /// First wait after a retryable failure (429, 5xx, timeout); doubles per attempt.
    #[serde(deserialize_with = "lenient")]
    pub meter_retry_initial_ms: u64,
    /// Longest wait between attempts.
    #[serde(deserialize_with = "lenient")]
    pub meter_retry_max_ms: u64,
}

impl Default for BillingConfig {
    fn default() -> Self {
        Self {
            stripe_webhook_secret: None,
            stripe_api_key: None,
            meter_event_name: None,
            meter_interval_s: 3600,
            stripe_api_base: "https://api.stripe.com".to_owned(),
            meter_timeout_ms: 10_000,
            meter_retry_initial_ms: 1_000,
            meter_retry_max_ms: 600_000,
        }
    }
}

impl BillingConfig {
    /// Whether usage is exported to Stripe: the API key and the event name both set.
    pub fn meter_export_on(&self) -> bool {
        self.stripe_api_key.is_some() && self.meter_event_name.is_some()
    }

    /// Checks the meter export's keys.
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.meter_interval_s == 0 {
            return Err("billing.meter_interval_s must be at least 1".into());
        }
        if self.meter_timeout_ms == 0 || self.meter_retry_initial_ms == 0 {
            return Err(
                "billing.meter_timeout_ms and billing.meter_retry_initial_ms must be at least 1"
                    .into(),
            );
        }
        if self.meter_retry_max_ms < self.meter_retry_initial_ms {
            return Err(
                "billing.meter_retry_max_ms must not be less than billing.meter_retry_initial_ms"
                    .into(),
            );
        }
        match reqwest::Url::parse(&self.stripe_api_base) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => {
                return Err(format!(
                    "billing.stripe_api_base is not an http(s) URL: `{}`",
                    self.stripe_api_base
                ));
            }
        }
        if let Some(name) = &self.meter_event_name
            && (name.is_empty() || name.len() > 100 || name.chars().any(char::is_control))
        {
            return Err("billing.meter_event_name must have 1 to 100 printable bytes".into());
        }
        Ok(())
    }
}

/// The characters a plan name may hold besides ASCII letters and digits (and `' '`
/// only inside a name).
pub const PLAN_PUNCTUATION: &str = " ._-+/:()&#,'";

/// What a plan name may be, as the API's refusals say it.
pub const PLAN_NAME_RULE: &str = "plan must be 1 to 64 characters: ASCII letters, digits, \
    spaces and . _ - + / : ( ) & # , ' — starting with a letter or digit, not ending \
    with a space; `free` is reserved";

/// Why `name` cannot be a plan name: it must have 1 to 64 characters, the first an ASCII
/// letter or digit, the others those or [`PLAN_PUNCTUATION`], the last not a space, and
/// not be `free` in any case. `name` is taken as given (callers trim first when they
/// accept surrounding blanks).
pub fn plan_name_problem(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || PLAN_PUNCTUATION.contains(c);
    let valid = name.chars().count() <= MAX_PLAN_CHARS
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && !name.ends_with(' ')
        && name.chars().all(allowed);
    if !valid {
        return Some(PLAN_NAME_RULE.to_owned());
    }
    if name.eq_ignore_ascii_case(FREE_PLAN) {
        return Some(format!("plan `{FREE_PLAN}` is reserved"));
    }
    None
}

/// Checks the catalogue: valid, unique names (case-insensitively), allowances ≥ 0,
/// price ids non-blank and unique.
pub(super) fn validate_plans(plans: &[PlanConfig]) -> Result<(), String> {
    let mut names = HashSet::new();
    let mut prices = HashSet::new();
    for plan in plans {
        if plan.name.trim() != plan.name {
            return Err(format!(
                "plans: name `{}` has surrounding blanks",
                plan.name
            ));
        }
        if let Some(problem) = plan_name_problem(&plan.name) {
            return Err(format!("plans: `{}`: {problem}", plan.name));
        }
        if !names.insert(plan.name.to_lowercase()) {
            return Err(format!("plans: name `{}` appears twice", plan.name));
        }
        if plan.monthly_allowance < 0 || plan.daily_allowance.is_some_and(|d| d < 0) {
            return Err(format!(
                "plans: `{}`: allowances must not be negative",
                plan.name
            ));
        }
        if let Err(problem) = checked_features(plan.features.clone(), "features") {
            return Err(format!("plans: `{}`: {problem}", plan.name));
        }
        if let Some(Err(problem)) = plan.rate_limit.map(|r| r.checked("rate_limit")) {
            return Err(format!("plans: `{}`: {problem}", plan.name));
        }
        if let Err(problem) = plan.budget().check() {
            return Err(format!("plans: `{}`: {problem}", plan.name));
        }
        if let Some(problem) = plan.checkout_url.as_deref().and_then(checkout_url_problem) {
            return Err(format!("plans: `{}`: {problem}", plan.name));
        }
        if let Some(price) = &plan.price_id {
            if price.trim().is_empty() {
                return Err(format!("plans: `{}`: price_id is blank", plan.name));
            }
            if !prices.insert(price.as_str()) {
                return Err(format!("plans: price_id `{price}` appears twice"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Catalogue;

    fn plan(name: &str, monthly: i64, price: Option<&str>) -> PlanConfig {
        PlanConfig {
            name: name.into(),
            monthly_allowance: monthly,
            daily_allowance: None,
            enforcement: Enforcement::Soft,
            price_id: price.map(Into::into),
            checkout_url: None,
            features: vec![],
            rate_limit: None,
            minute_allowance: None,
            unit_price_micros: None,
            spend_cap_day_micros: None,
            spend_cap_month_micros: None,
        }
    }

    fn with_checkout(url: &str) -> PlanConfig {
        PlanConfig {
            checkout_url: Some(url.into()),
            ..plan("pro", 10, None)
        }
    }

    #[test]
    fn checkout_urls_must_be_http_urls_with_a_host() {
        for good in [
            "https://buy.stripe.com/test_14k5mA",
            "http://127.0.0.1:9000/pay?plan=pro",
        ] {
            assert_eq!(validate_plans(&[with_checkout(good)]), Ok(()), "{good}");
        }
        for bad in [
            "buy.stripe.com/x",
            "javascript:alert(1)",
            "ftp://example.com/x",
            "https://user:pw@example.com/",
            "",
        ] {
            assert!(validate_plans(&[with_checkout(bad)]).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_checkout_link_carries_the_account_whether_or_not_the_url_has_a_query() {
        let link = |url: &str| with_checkout(url).checkout_link(42).unwrap();
        assert_eq!(
            link("https://buy.stripe.com/abc"),
            "https://buy.stripe.com/abc?client_reference_id=42"
        );
        assert_eq!(
            link("https://buy.stripe.com/abc?prefilled_email=a%40b.c"),
            "https://buy.stripe.com/abc?prefilled_email=a%40b.c&client_reference_id=42"
        );
        assert_eq!(
            link("https://pay.example/x?client_reference_id=7&a=1#top"),
            "https://pay.example/x?a=1&client_reference_id=42#top"
        );
        assert_eq!(plan("pro", 1, None).checkout_link(42), None);
    }

    #[test]
    fn a_catalogue_of_distinct_valid_plans_passes() {
        let plans = [plan("basic", 5_000, Some("price_b")), plan("pro", 0, None)];
        assert_eq!(validate_plans(&plans), Ok(()));
    }

    #[test]
    fn free_is_reserved_in_any_case() {
        assert!(validate_plans(&[plan("FREE", 1, None)]).is_err());
        assert!(plan_name_problem("Free").is_some());
    }

    #[test]
    fn names_must_be_unique_ignoring_case() {
        let err = validate_plans(&[plan("pro", 1, None), plan("Pro", 2, None)]).unwrap_err();
        assert!(err.contains("twice"), "{err}");
    }

    #[test]
    fn names_are_one_to_64_printable_characters_without_surrounding_blanks() {
        assert!(validate_plans(&[plan("", 1, None)]).is_err());
        assert!(validate_plans(&[plan(&"x".repeat(65), 1, None)]).is_err());
        assert!(validate_plans(&[plan(&"x".repeat(64), 1, None)]).is_ok());
        assert!(validate_plans(&[plan("a\tb", 1, None)]).is_err());
        assert!(validate_plans(&[plan(" pro", 1, None)]).is_err());
    }

    #[test]
    fn negative_allowances_are_refused() {
        assert!(validate_plans(&[plan("pro", -1, None)]).is_err());
        let mut daily = plan("pro", 1, None);
        daily.daily_allowance = Some(-1);
        assert!(validate_plans(&[daily]).is_err());
    }

    #[test]
    fn price_ids_are_unique_and_not_blank() {
        let twice = [plan("a", 1, Some("price_x")), plan("b", 1, Some("price_x"))];
        assert!(validate_plans(&twice).is_err());
        assert!(validate_plans(&[plan("a", 1, Some(" "))]).is_err());
    }

    #[test]
    fn plans_are_found_by_exact_name_and_by_price() {
        let config = Catalogue::from(vec![plan("pro", 10, Some("price_pro"))]).current();
        assert_eq!(config.plan("pro").map(|p| p.monthly_allowance), Some(10));
        assert!(config.plan("PRO").is_none());
        assert_eq!(
            config.plan_by_price("price_pro").map(|p| p.name.as_str()),
            Some("pro")
        );
        assert!(config.plan_by_price("price_other").is_none());
    }
}
