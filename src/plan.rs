//! The vocabulary of plans every layer shares: the reserved name of the free grant and
//! how an exhausted account is treated. A leaf module (it imports nothing of the crate),
//! so configuration can name these without importing the usage rules.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The reserved plan name of every account's free grant.
pub const FREE_PLAN: &str = "free";

/// How an exhausted account is treated (SPEC §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// Throttled by the admission hash; admitted calls are still accounted.
    #[default]
    Soft,
    /// Refused with `429 QUOTA_EXCEEDED`, never forwarded.
    Hard,
}

impl Enforcement {
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Soft => "soft",
            Enforcement::Hard => "hard",
        }
    }
}

impl TryFrom<String> for Enforcement {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        match value.as_str() {
            "soft" => Ok(Enforcement::Soft),
            "hard" => Ok(Enforcement::Hard),
            other => Err(format!("unknown enforcement `{other}`")),
        }
    }
}

/// Most calls per second a rate limit may grant (SPEC §16).
pub const MAX_PER_SECOND: u32 = 100_000;
/// Largest burst a rate limit may hold: a minute at the highest rate.
pub const MAX_BURST: u32 = 6_000_000;

/// A rate limit per second (SPEC §16): a bucket of `burst` calls refilled at
/// `per_second` calls a second. Plans, subscriptions and keys may carry one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub struct RateLimit {
    #[schema(minimum = 1, maximum = 100000)]
    pub per_second: u32,
    /// At least `per_second`; `per_second` when left out.
    #[schema(minimum = 1, maximum = 6000000)]
    pub burst: u32,
}

/// A rate limit as written in a request or the configuration: the burst may be left out.
/// `burst` must be at least `per_second`, a rule across fields the schema cannot state
/// (`422 VALIDATION_FAILED` naming `burst` otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitInput {
    /// Calls per second, 1 to 100000.
    #[serde(deserialize_with = "crate::json_number::whole")]
    #[schema(minimum = 1, maximum = 100000, example = 10)]
    pub per_second: i64,
    /// Calls the bucket holds, from `per_second` to 6000000; `per_second` when left out
    /// or null.
    #[serde(default, deserialize_with = "crate::json_number::whole_or_null")]
    #[schema(minimum = 1, maximum = 6000000, example = 20)]
    pub burst: Option<i64>,
}

impl RateLimitInput {
    /// The limit, checked: `per_second` 1–[`MAX_PER_SECOND`], `burst` from `per_second` to
    /// [`MAX_BURST`]. The refusal names the field under `field`.
    pub fn checked(self, field: &str) -> Result<RateLimit, String> {
        let per_second = u32::try_from(self.per_second)
            .ok()
            .filter(|n| (1..=MAX_PER_SECOND).contains(n))
            .ok_or_else(|| {
                format!("{field}.per_second must be an integer from 1 to {MAX_PER_SECOND}")
            })?;
        let burst = match self.burst {
            None => per_second,
            Some(b) => u32::try_from(b)
                .ok()
                .filter(|b| (per_second..=MAX_BURST).contains(b))
                .ok_or_else(|| {
                    format!(
                        "{field}.burst must be an integer from per_second ({per_second}) to {MAX_BURST}"
                    )
                })?,
        };
        Ok(RateLimit { per_second, burst })
    }
}

impl RateLimit {
    /// The limit stored as two nullable columns, when both are set and valid.
    pub fn from_columns(per_second: Option<i32>, burst: Option<i32>) -> Option<RateLimit> {
        let per_second = u32::try_from(per_second?).ok().filter(|n| *n > 0)?;
        let burst = u32::try_from(burst?).ok().filter(|b| *b >= per_second)?;
        Some(RateLimit { per_second, burst })
    }

    /// The two columns a limit is stored in (`None` = no limit).
    pub fn columns(limit: Option<RateLimit>) -> (Option<i32>, Option<i32>) {
        match limit {
            // Both fit: MAX_BURST < i32::MAX.
            Some(l) => (
                i32::try_from(l.per_second).ok(),
                i32::try_from(l.burst).ok(),
            ),
            None => (None, None),
        }
    }

    /// The tighter of two optional limits: the lower rate, and the lower burst.
    pub fn tighter(a: Option<RateLimit>, b: Option<RateLimit>) -> Option<RateLimit> {
        match (a, b) {
            (Some(a), Some(b)) => Some(RateLimit {
                per_second: a.per_second.min(b.per_second),
                burst: a.burst.min(b.burst).max(a.per_second.min(b.per_second)),
            }),
            (a, b) => a.or(b),
        }
    }
}

/// Longest feature name (SPEC §17).
pub const MAX_FEATURE_CHARS: usize = 64;
/// Most features one plan or subscription lists.
pub const MAX_FEATURES: usize = 100;

/// Why `name` cannot be a feature: 1 to 64 of `[a-z0-9_-]`.
pub fn feature_problem(name: &str) -> Option<String> {
    let valid = !name.is_empty()
        && name.len() <= MAX_FEATURE_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    (!valid).then(|| {
        format!("feature names must be 1 to {MAX_FEATURE_CHARS} characters of a-z, 0-9, _ and -")
    })
}

/// A list of features, checked and without repeats (order kept). `field` names the
/// list in the refusal.
pub fn checked_features(features: Vec<String>, field: &str) -> Result<Vec<String>, String> {
    if features.len() > MAX_FEATURES {
        return Err(format!("{field} may list at most {MAX_FEATURES} features"));
    }
    let mut kept: Vec<String> = Vec::with_capacity(features.len());
    for feature in features {
        if let Some(problem) = feature_problem(&feature) {
            return Err(format!("{field}: {problem}"));
        }
        if !kept.contains(&feature) {
            kept.push(feature);
        }
    }
    Ok(kept)
}

/// What an account's active subscription entitles it to besides units (SPEC §16, §17,
/// §20).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanTerms {
    pub features: Vec<String>,
    pub rate_limit: Option<RateLimit>,
    pub budget: Budget,
}

/// Largest figure a minute window, a price or a cap may have: well past any real plan,
/// and small enough that a month's units times a price never overflows `i64` in
/// practice (products saturate regardless).
pub const MAX_BUDGET_FIGURE: i64 = 1_000_000_000_000_000;

/// A plan's windows of totals beside the month and the day, and its money (SPEC §20):
/// units per fixed minute, the price of a unit in micro-USD and the most a UTC day and
/// month may cost. `None` = none.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    ToSchema,
    sqlx::FromRow,
)]
pub struct Budget {
    /// Units per fixed 60 s window aligned to the epoch minute (UTC).
    #[schema(minimum = 0)]
    pub minute_allowance: Option<i64>,
    /// Micro-USD per unit.
    #[schema(minimum = 0)]
    pub unit_price_micros: Option<i64>,
    /// The most a UTC day may cost, in micro-USD.
    #[schema(minimum = 0)]
    pub spend_cap_day_micros: Option<i64>,
    /// The most a UTC month may cost, in micro-USD.
    #[schema(minimum = 0)]
    pub spend_cap_month_micros: Option<i64>,
}

impl Budget {
    /// What `units` cost, in micro-USD (0 without a price).
    pub fn spent(&self, units: i64) -> i64 {
        units
            .max(0)
            .saturating_mul(self.unit_price_micros.unwrap_or(0))
    }

    /// Units after which a cap of `cap` micro-USD is reached (`spent >= cap`): a call is
    /// refused once that many units are used. `None` when the cap can never be reached
    /// (no cap, or units cost nothing and the cap is above 0).
    pub fn cap_units(&self, cap: Option<i64>) -> Option<i64> {
        let cap = cap?;
        if cap <= 0 {
            return Some(0);
        }
        let price = self.unit_price_micros.filter(|p| *p > 0)?;
        // Reached at the first unit count whose cost is at least the cap.
        Some(cap / price + i64::from(cap % price != 0))
    }

    /// Units the day's cap allows.
    pub fn day_cap_units(&self) -> Option<i64> {
        self.cap_units(self.spend_cap_day_micros)
    }

    /// Units the month's cap allows.
    pub fn month_cap_units(&self) -> Option<i64> {
        self.cap_units(self.spend_cap_month_micros)
    }

    /// Whether a cap may refuse calls.
    pub fn has_caps(&self) -> bool {
        self.day_cap_units().is_some() || self.month_cap_units().is_some()
    }

    /// Checks the figures: each from 0 to [`MAX_BUDGET_FIGURE`], and a cap only with a
    /// price. The refusal names the field.
    pub fn check(&self) -> Result<(), String> {
        for (name, value) in [
            ("minute_allowance", self.minute_allowance),
            ("unit_price_micros", self.unit_price_micros),
            ("spend_cap_day_micros", self.spend_cap_day_micros),
            ("spend_cap_month_micros", self.spend_cap_month_micros),
        ] {
            if value.is_some_and(|v| !(0..=MAX_BUDGET_FIGURE).contains(&v)) {
                return Err(format!(
                    "{name} must be an integer from 0 to {MAX_BUDGET_FIGURE}"
                ));
            }
        }
        if self.unit_price_micros.is_none()
            && (self.spend_cap_day_micros.is_some() || self.spend_cap_month_micros.is_some())
        {
            return Err("a spend cap needs unit_price_micros".into());
        }
        Ok(())
    }
}

impl PlanTerms {
    pub fn has(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(per_second: i64, burst: Option<i64>) -> RateLimitInput {
        RateLimitInput { per_second, burst }
    }

    #[test]
    fn a_cap_is_reached_at_the_first_unit_count_costing_at_least_the_cap() {
        let budget = |price, day, month| Budget {
            minute_allowance: None,
            unit_price_micros: price,
            spend_cap_day_micros: day,
            spend_cap_month_micros: month,
        };
        let b = budget(Some(1_000), Some(5_000), Some(5_500));
        assert_eq!(b.day_cap_units(), Some(5));
        assert_eq!(b.month_cap_units(), Some(6), "5 units cost 5,000 < 5,500");
        assert_eq!(b.spent(7), 7_000);
        assert_eq!(budget(Some(0), Some(1), None).day_cap_units(), None);
        assert_eq!(budget(Some(0), Some(0), None).day_cap_units(), Some(0));
        assert_eq!(budget(None, None, None).spent(10), 0);
        assert!(!budget(Some(5), None, None).has_caps());
        assert_eq!(
            budget(Some(i64::MAX / 2), None, None).spent(3),
            i64::MAX,
            "saturates"
        );
        assert!(budget(None, Some(1), None).check().is_err());
        assert!(budget(Some(-1), None, None).check().is_err());
        assert!(b.check().is_ok());
    }

    #[test]
    fn a_rate_limit_is_checked_and_its_burst_defaults_to_its_rate() {
        assert_eq!(
            input(10, None).checked("rate_limit"),
            Ok(RateLimit {
                per_second: 10,
                burst: 10
            })
        );
        assert_eq!(
            input(10, Some(25)).checked("rate_limit"),
            Ok(RateLimit {
                per_second: 10,
                burst: 25
            })
        );
        for bad in [
            input(0, None),
            input(100_001, None),
            input(-1, None),
            input(10, Some(9)),
        ] {
            let problem = bad.checked("rate_limit").unwrap_err();
            assert!(problem.starts_with("rate_limit."), "{problem}");
        }
    }

    #[test]
    fn the_tighter_limit_wins_field_by_field() {
        let key = Some(RateLimit {
            per_second: 5,
            burst: 50,
        });
        let plan = Some(RateLimit {
            per_second: 10,
            burst: 20,
        });
        assert_eq!(
            RateLimit::tighter(key, plan),
            Some(RateLimit {
                per_second: 5,
                burst: 20
            })
        );
        assert_eq!(RateLimit::tighter(None, plan), plan);
        assert_eq!(RateLimit::tighter(None, None), None);
    }

    #[test]
    fn features_are_lowercase_names_without_repeats() {
        assert_eq!(
            checked_features(
                vec!["bulk-export".into(), "synastry".into(), "synastry".into()],
                "features"
            ),
            Ok(vec!["bulk-export".to_owned(), "synastry".to_owned()])
        );
        assert!(checked_features(vec!["Synastry".into()], "features").is_err());
        assert!(checked_features(vec![String::new()], "features").is_err());
        assert!(checked_features(vec!["a".repeat(65)], "features").is_err());
    }
}
