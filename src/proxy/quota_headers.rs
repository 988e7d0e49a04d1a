//! The quota headers of SPEC §3.1.6, in the syntax of the IETF draft "RateLimit header
//! fields for HTTP" (structured-field lists of items with `q`/`w` and `r`/`t`
//! parameters):
//!
//! ```text
//! RateLimit-Policy: "monthly";q=<allowance + credits>;w=<seconds of the month>, "daily";q=..;w=86400
//! RateLimit: "monthly";r=<remaining>;t=<seconds until the month ends>, "daily";r=..;t=..
//! ```
//!
//! A call refused by its key's own monthly limit (SPEC §13, §21) also gets a `"key"`
//! item, `"key";q=<limit>;w=<seconds of the month>` and `"key";r=0;t=<seconds until the
//! month ends>`, so the headers explain the refusal.
//!
//! A call under a rate limit per second (SPEC §16) gets a `"burst"` item,
//! `"burst";q=<burst>;w=1` and `"burst";r=<calls that would pass now>;t=<seconds until
//! the bucket is full>`; it is the only item when metering is off (local mode), where a
//! key's own rate limit still applies.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::month::{Day, Month, seconds_until};
use crate::throttle::minute::MinuteState;
use crate::throttle::rate::Burst;
use crate::usage::Standing;

pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// What the headers of one call say: the account's windows, a used-up key's month, the
/// rate limit's bucket and the minute window (each when known).
#[derive(Default)]
pub struct Items<'a> {
    pub standing: Option<&'a Standing>,
    pub key_limit: Option<i64>,
    pub burst: Option<Burst>,
    pub minute: Option<MinuteState>,
}

/// The two header values for `standing` at `now`.
pub fn values(standing: &Standing, now: DateTime<Utc>) -> (String, String) {
    let (policy, current) = write(
        &Items {
            standing: Some(standing),
            ..Items::default()
        },
        now,
    );
    (
        String::from_utf8(policy).expect("ASCII"),
        String::from_utf8(current).expect("ASCII"),
    )
}

/// Both values as bytes, numbers written with `itoa` (no formatting machinery).
fn write(items: &Items<'_>, now: DateTime<Utc>) -> (Vec<u8>, Vec<u8>) {
    let mut numbers = itoa::Buffer::new();
    let mut policy = Vec::with_capacity(64);
    let mut current = Vec::with_capacity(64);
    if let Some(standing) = items.standing {
        write_windows(&mut policy, &mut current, standing, items.key_limit, now);
    }
    let mut item = |name: &[u8], q: i64, w: i64, r: i64, t: i64| {
        if !policy.is_empty() {
            policy.extend_from_slice(b", ");
            current.extend_from_slice(b", ");
        }
        for (out, [first, second], (a, b)) in [
            (&mut policy, [b";q=", b";w="], (q, w)),
            (&mut current, [b";r=", b";t="], (r, t)),
        ] {
            out.push(b'"');
            out.extend_from_slice(name);
            out.push(b'"');
            out.extend_from_slice(first);
            out.extend_from_slice(numbers.format(a).as_bytes());
            out.extend_from_slice(second);
            out.extend_from_slice(numbers.format(b).as_bytes());
        }
    };
    if let Some(minute) = items.minute {
        item(
            b"minute",
            minute.allowance,
            60,
            minute.remaining(),
            minute.reset_in,
        );
    }
    if let Some(burst) = items.burst {
        item(
            b"burst",
            i64::from(burst.burst),
            1,
            i64::from(burst.remaining),
            i64::try_from(burst.full_in).unwrap_or(i64::MAX),
        );
    }
    (policy, current)
}

/// The items of the month, the day and a used-up key's month.
fn write_windows(
    policy: &mut Vec<u8>,
    current: &mut Vec<u8>,
    standing: &Standing,
    key_limit: Option<i64>,
    now: DateTime<Utc>,
) {
    let (month, day) = (Month::containing(now), Day::containing(now));
    let month_seconds = (month.end() - month.start()).num_seconds();
    let mut numbers = itoa::Buffer::new();
    policy.extend_from_slice(b"\"monthly\";q=");
    policy.extend_from_slice(
        numbers
            .format(standing.allowance.saturating_add(standing.credits))
            .as_bytes(),
    );
    policy.extend_from_slice(b";w=");
    policy.extend_from_slice(numbers.format(month_seconds).as_bytes());
    current.extend_from_slice(b"\"monthly\";r=");
    current.extend_from_slice(numbers.format(standing.remaining()).as_bytes());
    current.extend_from_slice(b";t=");
    current.extend_from_slice(numbers.format(seconds_until(month.end(), now)).as_bytes());
    if let Some(daily) = standing.daily {
        policy.extend_from_slice(b", \"daily\";q=");
        policy.extend_from_slice(numbers.format(daily.allowance).as_bytes());
        policy.extend_from_slice(b";w=86400");
        current.extend_from_slice(b", \"daily\";r=");
        current.extend_from_slice(numbers.format(daily.remaining()).as_bytes());
        current.extend_from_slice(b";t=");
        current.extend_from_slice(numbers.format(seconds_until(day.end(), now)).as_bytes());
    }
    if let Some(limit) = key_limit {
        policy.extend_from_slice(b", \"key\";q=");
        policy.extend_from_slice(numbers.format(limit).as_bytes());
        policy.extend_from_slice(b";w=");
        policy.extend_from_slice(numbers.format(month_seconds).as_bytes());
        current.extend_from_slice(b", \"key\";r=0;t=");
        current.extend_from_slice(numbers.format(seconds_until(month.end(), now)).as_bytes());
    }
}

/// Sets both headers on a response from `items`. Nothing when neither a standing nor a
/// rate limit is known.
pub fn apply(headers: &mut HeaderMap, items: &Items<'_>, now: DateTime<Utc>) {
    if items.standing.is_none() && items.burst.is_none() {
        return;
    }
    let (policy, current) = write(items, now);
    if let (Ok(policy), Ok(current)) = (
        HeaderValue::from_maybe_shared(Bytes::from(policy)),
        HeaderValue::from_maybe_shared(Bytes::from(current)),
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
            terms: None,
            next_change: None,
            account_id: 1,
            plan: "pro".into(),
            enforcement: Enforcement::Soft,
            allowance: 3000,
            used: 10,
            credits: 50,
            day_used: daily.map_or(0, |d| d.used),
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
    fn a_key_refused_by_its_own_limit_adds_a_key_item_with_nothing_left() {
        let now: DateTime<Utc> = "2026-11-30T23:59:00Z".parse().unwrap();
        let items = Items {
            standing: Some(&standing(None)),
            key_limit: Some(100),
            ..Items::default()
        };
        let (policy, current) = write(&items, now);
        assert_eq!(
            String::from_utf8(policy).unwrap(),
            "\"monthly\";q=3050;w=2592000, \"key\";q=100;w=2592000"
        );
        assert_eq!(
            String::from_utf8(current).unwrap(),
            "\"monthly\";r=3040;t=60, \"key\";r=0;t=60"
        );
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

    #[test]
    fn a_rate_limit_adds_a_burst_item_alone_or_after_the_windows() {
        let now: DateTime<Utc> = "2026-11-30T23:59:00Z".parse().unwrap();
        let burst = Burst {
            burst: 20,
            remaining: 19,
            full_in: 1,
        };
        let with_standing = Items {
            standing: Some(&standing(None)),
            burst: Some(burst),
            ..Items::default()
        };
        let (policy, current) = write(&with_standing, now);
        assert_eq!(
            String::from_utf8(policy).unwrap(),
            "\"monthly\";q=3050;w=2592000, \"burst\";q=20;w=1"
        );
        assert_eq!(
            String::from_utf8(current).unwrap(),
            "\"monthly\";r=3040;t=60, \"burst\";r=19;t=1"
        );
        let alone = Items {
            burst: Some(burst),
            ..Items::default()
        };
        let (policy, current) = write(&alone, now);
        assert_eq!(String::from_utf8(policy).unwrap(), "\"burst\";q=20;w=1");
        assert_eq!(String::from_utf8(current).unwrap(), "\"burst\";r=19;t=1");
    }

    #[test]
    fn a_minute_window_adds_a_minute_item_before_the_burst() {
        let now: DateTime<Utc> = "2026-11-30T23:59:00Z".parse().unwrap();
        let items = Items {
            standing: Some(&standing(None)),
            minute: Some(MinuteState {
                allowance: 10,
                used: 10,
                reset_in: 60,
            }),
            ..Items::default()
        };
        let (policy, current) = write(&items, now);
        assert_eq!(
            String::from_utf8(policy).unwrap(),
            "\"monthly\";q=3050;w=2592000, \"minute\";q=10;w=60"
        );
        assert_eq!(
            String::from_utf8(current).unwrap(),
            "\"monthly\";r=3040;t=60, \"minute\";r=0;t=60"
        );
    }
}
