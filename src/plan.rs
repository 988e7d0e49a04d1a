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

/// What an account's active subscription entitles it to besides units (SPEC §16, §17).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanTerms {
    pub features: Vec<String>,
    pub rate_limit: Option<RateLimit>,
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
