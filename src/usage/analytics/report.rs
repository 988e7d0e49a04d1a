//! The analytics report (SPEC §18): an account's rollup over at most 93 days, grouped
//! by day, route or key, with calls, units, upstream errors and latency percentiles.
//! One indexed range read of the account's rollup rows, whatever the ledger's size.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::{IntoParams, ToSchema};

use super::histogram::Histogram;
use crate::error::ApiError;
use crate::month::Month;

/// Most days one report covers.
pub const MAX_DAYS: i64 = 93;

/// How the rows are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    #[default]
    Day,
    Route,
    Key,
}

/// The query of `GET /account/v1/analytics` and its admin twin. `to` must not be
/// before `from` nor more than 92 days after it (either one left out included): rules
/// across parameters and against the clock the schema cannot state.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AnalyticsQuery {
    /// First UTC day (`YYYY-MM-DD`, a real date), inclusive; the first day of this month
    /// when absent.
    #[param(value_type = Option<String>, format = Date, pattern = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", example = "2026-12-01")]
    pub from: Option<String>,
    /// Last UTC day (`YYYY-MM-DD`, a real date), inclusive, from `from` to 92 days after
    /// it; today (or `from`, if later) when absent.
    #[param(value_type = Option<String>, format = Date, pattern = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", example = "2026-12-07")]
    pub to: Option<String>,
    /// `day` (the default), `route` or `key`.
    #[param(value_type = Option<GroupBy>, inline)]
    pub group_by: Option<String>,
}

/// Latency percentiles of the upstream (request sent to response head), in
/// milliseconds; null when no call had a measured latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Percentiles {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

/// One group's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnalyticsRow {
    /// The UTC day (with `group_by=day`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub day: Option<NaiveDate>,
    /// The route (with `group_by=route`): a configured prefix, the path's first three
    /// segments, or `other`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub route: Option<String>,
    /// The key (with `group_by=key`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub key_id: Option<i64>,
    pub calls: i64,
    pub units: i64,
    /// Calls the upstream answered with a 5xx status.
    pub errors: i64,
    pub latency_ms: Percentiles,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnalyticsReport {
    pub account_id: i64,
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub group_by: GroupBy,
    pub rows: Vec<AnalyticsRow>,
}

/// The checked range and grouping of a query at `now`.
pub fn parse(
    query: &AnalyticsQuery,
    now: DateTime<Utc>,
) -> Result<(NaiveDate, NaiveDate, GroupBy), ApiError> {
    let day = |field: &str, text: &str| {
        NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()
            .filter(|d| text.len() == 10 && d.format("%Y-%m-%d").to_string() == text)
            .ok_or_else(|| ApiError::Validation(format!("{field} must be a date YYYY-MM-DD")))
    };
    let today = now.date_naive();
    let from = match query.from.as_deref() {
        Some(text) => day("from", text)?,
        None => Month::containing(now).start().date_naive(),
    };
    let to = match query.to.as_deref() {
        Some(text) => day("to", text)?,
        None => today.max(from),
    };
    if to < from {
        return Err(ApiError::Validation("to must not be before from".into()));
    }
    if (to - from).num_days() + 1 > MAX_DAYS {
        return Err(ApiError::Validation(format!(
            "from and to may span at most {MAX_DAYS} days"
        )));
    }
    let group_by = match query.group_by.as_deref() {
        None | Some("day") => GroupBy::Day,
        Some("route") => GroupBy::Route,
        Some("key") => GroupBy::Key,
        Some(_) => {
            return Err(ApiError::Validation(
                "group_by must be day, route or key".into(),
            ));
        }
    };
    Ok((from, to, group_by))
}

/// The report of `account_id` over `[from, to]`, grouped by `group_by`. Days are listed
/// whether or not they had calls; routes and keys only when they did (most calls first).
pub async fn analytics(
    conn: &mut PgConnection,
    account_id: i64,
    from: NaiveDate,
    to: NaiveDate,
    group_by: GroupBy,
) -> Result<AnalyticsReport, sqlx::Error> {
    let stored = sqlx::query!(
        "SELECT key_id, day, route, calls, units, errors, latency FROM usage_rollup
         WHERE account_id = $1 AND day BETWEEN $2 AND $3",
        account_id,
        from,
        to,
    )
    .fetch_all(conn)
    .await?;
    #[derive(Default)]
    struct Sum {
        calls: i64,
        units: i64,
        errors: i64,
        latency: Histogram,
    }
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Group {
        Day(NaiveDate),
        Route(String),
        Key(i64),
    }
    let mut groups: BTreeMap<Group, Sum> = BTreeMap::new();
    if group_by == GroupBy::Day {
        let mut day = from;
        while day <= to {
            groups.insert(Group::Day(day), Sum::default());
            day += Duration::days(1);
        }
    }
    for row in stored {
        let group = match group_by {
            GroupBy::Day => Group::Day(row.day),
            GroupBy::Route => Group::Route(row.route),
            GroupBy::Key => Group::Key(row.key_id),
        };
        let sum = groups.entry(group).or_default();
        sum.calls += row.calls;
        sum.units += row.units;
        sum.errors += row.errors;
        sum.latency.add(&row.latency);
    }
    let mut rows: Vec<AnalyticsRow> = groups
        .into_iter()
        .map(|(group, sum)| {
            let percentile = |q| {
                sum.latency
                    .quantile_ms(q)
                    .map(|ms| (ms * 1000.0).round() / 1000.0)
            };
            let mut row = AnalyticsRow {
                day: None,
                route: None,
                key_id: None,
                calls: sum.calls,
                units: sum.units,
                errors: sum.errors,
                latency_ms: Percentiles {
                    p50: percentile(0.50),
                    p95: percentile(0.95),
                    p99: percentile(0.99),
                },
            };
            match group {
                Group::Day(day) => row.day = Some(day),
                Group::Route(route) => row.route = Some(route),
                Group::Key(key) => row.key_id = Some(key),
            }
            row
        })
        .collect();
    if group_by != GroupBy::Day {
        rows.sort_by_key(|r| std::cmp::Reverse(r.calls));
    }
    Ok(AnalyticsReport {
        account_id,
        from,
        to,
        group_by,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(from: Option<&str>, to: Option<&str>, group_by: Option<&str>) -> AnalyticsQuery {
        AnalyticsQuery {
            from: from.map(Into::into),
            to: to.map(Into::into),
            group_by: group_by.map(Into::into),
        }
    }

    #[test]
    fn a_range_is_at_most_93_days_of_real_dates() {
        let now: DateTime<Utc> = "2026-12-07T12:00:00Z".parse().unwrap();
        let (from, to, by) = parse(&query(None, None, None), now).unwrap();
        assert_eq!(
            (from.to_string(), to.to_string(), by),
            ("2026-12-01".into(), "2026-12-07".into(), GroupBy::Day)
        );
        assert!(parse(&query(Some("2026-09-06"), Some("2026-12-07"), None), now).is_ok());
        assert!(parse(&query(Some("2026-09-05"), Some("2026-12-07"), None), now).is_err());
        assert!(parse(&query(Some("2026-02-30"), None, None), now).is_err());
        assert!(parse(&query(Some("2026-2-3"), None, None), now).is_err());
        assert!(parse(&query(Some("2026-12-08"), Some("2026-12-07"), None), now).is_err());
        assert!(parse(&query(None, None, Some("week")), now).is_err());
        assert_eq!(
            parse(&query(None, None, Some("key")), now).unwrap().2,
            GroupBy::Key
        );
    }
}

/// The documented date pattern (with `format: date`, a real date) is `parse`'s rule,
/// checked with the engine the fuzz suite validates with.
#[cfg(test)]
mod prop_tests {
    use proptest::prelude::*;
    use utoipa::IntoParams;

    use super::*;
    use crate::prop_support::pattern_at;

    /// The parameter `name` as `/openapi.json` states it.
    fn parameter(name: &str) -> serde_json::Value {
        AnalyticsQuery::into_params(|| None)
            .into_iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no parameter {name}"))
    }

    fn date_pattern() -> &'static fancy_regex::Regex {
        static PATTERN: std::sync::LazyLock<fancy_regex::Regex> =
            std::sync::LazyLock::new(|| pattern_at(&parameter("from"), "/schema/pattern"));
        &PATTERN
    }

    #[test]
    fn both_ends_are_documented_alike_and_group_by_lists_the_groupings() {
        for name in ["from", "to"] {
            let schema = &parameter(name)["schema"];
            assert_eq!(schema["format"], "date", "{name}");
            assert_eq!(schema["pattern"], parameter("from")["schema"]["pattern"]);
        }
        assert_eq!(
            parameter("group_by")["schema"]["enum"],
            serde_json::json!(["day", "route", "key"])
        );
    }

    fn date_like() -> impl Strategy<Value = String> {
        let digits = |n: usize| {
            prop::collection::vec(prop::sample::select(vec!['0', '1', '2', '3', '9']), n)
                .prop_map(String::from_iter)
        };
        prop_oneof![
            6 => (0..=9999_i32, 0..=13_u32, 0..=32_u32)
                .prop_map(|(y, m, d)| format!("{y:04}-{m:02}-{d:02}")),
            2 => (digits(4), digits(2), digits(2)).prop_map(|(y, m, d)| format!("{y}-{m}-{d}")),
            1 => prop::sample::select(vec![
                "2026-2-3", "26-02-03", "2026-02-03 ", " 2026-02-03", "2026-02-03\n",
                "2026/02/03", "+2026-02-03", "12026-02-03", "2026-02-03T00:00:00Z", "",
                "２０２６-02-03",
            ])
            .prop_map(str::to_owned),
            1 => prop::collection::vec(any::<char>(), 0..12).prop_map(String::from_iter),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn the_documented_date_is_the_handlers_rule(date in date_like()) {
            // `format: date`: a real day of the proleptic Gregorian calendar.
            let real = |text: &str| {
                let parts: Vec<&str> = text.split('-').collect();
                let [y, m, d] = parts[..] else { return false };
                let (Ok(y), Ok(m), Ok(d)) = (y.parse(), m.parse(), d.parse()) else {
                    return false;
                };
                NaiveDate::from_ymd_opt(y, m, d).is_some()
            };
            let documented = date_pattern().is_match(&date).unwrap() && real(&date);
            let query = AnalyticsQuery {
                from: Some(date.clone()),
                to: Some(date.clone()),
                group_by: None,
            };
            prop_assert_eq!(documented, parse(&query, Utc::now()).is_ok(), "{:?}", date);
        }
    }
}
