//! The quota headers of SPEC §3.1.6, in the syntax of the IETF draft "RateLimit header
//! fields for HTTP" (structured-field lists of items with `q`/`w` and `r`/`t`
//! parameters):
//!
//! ```text
//! RateLimit-Policy: "monthly";q=<allowance + credits>;w=<seconds of the month>, "daily";q=..;w=86400
//! RateLimit: "monthly";r=<remaining>;t=<seconds until the month ends>, "daily";r=..;t=..
//! ```

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use chrono::{DateTime, Utc};

use crate::month::{Day, Month, seconds_until};
use crate::usage::Standing;

pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The two header values for `standing` at `now`.
pub fn values(standing: &Standing, now: DateTime<Utc>) -> (String, String) {
    let (month, day) = (Month::containing(now), Day::containing(now));
    let month_seconds = (month.end() - month.start()).num_seconds();
    let mut policy = format!(
        "\"monthly\";q={};w={month_seconds}",
        standing.allowance.saturating_add(standing.credits)
    );
    let mut current = format!(
        "\"monthly\";r={};t={}",
        standing.remaining(),
        seconds_until(month.end(), now)
    );
    if let Some(daily) = standing.daily {
        policy.push_str(&format!(", \"daily\";q={};w=86400", daily.allowance));
        current.push_str(&format!(
            ", \"daily\";r={};t={}",
            daily.remaining(),
            seconds_until(day.end(), now)
        ));
    }
    (policy, current)
}

/// Sets both headers on a response.
pub fn apply(headers: &mut HeaderMap, standing: &Standing, now: DateTime<Utc>) {
    let (policy, current) = values(standing, now);
    if let (Ok(policy), Ok(current)) = (
        HeaderValue::try_from(policy),
        HeaderValue::try_from(current),
    ) {
        headers.insert(RATELIMIT_POLICY.clone(), policy);
        headers.insert(RATELIMIT.clone(), current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::rules::{DailyStanding, Enforcement};

    fn standing(daily: Option<DailyStanding>) -> Standing {
        Standing {
            account_id: 1,
            plan: "pro".into(),
            enforcement: Enforcement::Soft,
            allowance: 3000,
            used: 10,
            credits: 50,
            daily,
        }
    }

    #[test]
    fn monthly_items_follow_the_drafts_syntax() {
        let now: DateTime<Utc> = "2026-11-30T23:59:00Z".parse().unwrap();
        let (policy, current) = values(&standing(None), now);
        assert_eq!(policy, "\"monthly\";q=3050;w=2592000");
        assert_eq!(current, "\"monthly\";r=3040;t=60");
    }

    #[test]
    fn a_daily_allowance_adds_a_daily_item_to_each() {
        let now: DateTime<Utc> = "2026-11-15T12:00:00Z".parse().unwrap();
        let daily = DailyStanding {
            allowance: 100,
            used: 100,
        };
        let (policy, current) = values(&standing(Some(daily)), now);
        assert_eq!(
            policy,
            "\"monthly\";q=3050;w=2592000, \"daily\";q=100;w=86400"
        );
        assert_eq!(
            current,
            "\"monthly\";r=3040;t=1339200, \"daily\";r=0;t=43200"
        );
    }
}
