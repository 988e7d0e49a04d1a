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
use crate::plan::{Enforcement, FREE_PLAN};

/// Longest plan name, in characters.
pub const MAX_PLAN_CHARS: usize = 64;

/// One `[[plans]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
}

/// `[billing]`: payment webhooks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BillingConfig {
    /// The endpoint's signing secret (`whsec_…`); unset or blank = `/billing/v1/stripe`
    /// absent.
    pub stripe_webhook_secret: Option<SecretString>,
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
    use crate::config::Config;

    fn plan(name: &str, monthly: i64, price: Option<&str>) -> PlanConfig {
        PlanConfig {
            name: name.into(),
            monthly_allowance: monthly,
            daily_allowance: None,
            enforcement: Enforcement::Soft,
            price_id: price.map(Into::into),
        }
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
        let config = Config {
            plans: vec![plan("pro", 10, Some("price_pro"))],
            ..Config::default()
        };
        assert_eq!(config.plan("pro").map(|p| p.monthly_allowance), Some(10));
        assert!(config.plan("PRO").is_none());
        assert_eq!(
            config.plan_by_price("price_pro").map(|p| p.name.as_str()),
            Some("pro")
        );
        assert!(config.plan_by_price("price_other").is_none());
    }
}
