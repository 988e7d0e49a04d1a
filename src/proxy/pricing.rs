//! What a call costs (SPEC §6): the price of the longest matching route prefix, or the
//! upstream's own figure in `pricing.cost_header`, which never reaches the client. A
//! reload replaces the whole `[pricing]` section at once (SPEC §20): each read takes one
//! `ArcSwap` load, no lock.

use arc_swap::ArcSwap;
use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::PricingConfig;
use crate::telemetry::RateLimitedLog;

/// Largest cost the upstream may report for one call.
pub const MAX_REPORTED_COST: i64 = 1_000_000;

/// The configured prices, as the last load or reload set them.
#[derive(Debug, Default)]
pub struct Pricing {
    table: ArcSwap<PriceTable>,
    bad_header_log: RateLimitedLog,
}

/// What one `[pricing]` section says.
#[derive(Debug, Default)]
struct PriceTable {
    /// Longest prefix first.
    routes: Vec<(String, i64)>,
    cost_header: Option<HeaderName>,
    /// Read `event: usage` from event streams (SPEC §20).
    stream_usage: bool,
}

impl Pricing {
    pub fn from_config(config: &PricingConfig) -> anyhow::Result<Self> {
        Ok(Self {
            table: ArcSwap::from_pointee(PriceTable::from_config(config)?),
            bad_header_log: RateLimitedLog::default(),
        })
    }

    /// Puts `new`'s prices in force for every call priced from now on.
    pub fn replace(&self, new: Pricing) {
        self.table.store(new.table.into_inner());
    }

    /// The price of a call to `path`: its longest matching prefix's, else 1.
    pub fn route_cost(&self, path: &str) -> i64 {
        self.table.load().route_cost(path)
    }

    /// Whether streamed responses report their usage as they go (`pricing.stream_usage`).
    pub fn stream_usage(&self) -> bool {
        self.table.load().stream_usage
    }

    /// Whether the upstream may report costs (`pricing.cost_header` is set).
    pub fn reads_costs(&self) -> bool {
        self.table.load().cost_header.is_some()
    }

    /// Takes the cost header off an upstream response; its value when it is an
    /// integer from 0 to [`MAX_REPORTED_COST`], else `None` (with a warning).
    pub fn take_reported_cost(&self, headers: &mut HeaderMap) -> Option<i64> {
        let table = self.table.load();
        let name = table.cost_header.as_ref()?;
        let value = headers.remove(name)?;
        let cost = parse_cost(&value);
        if cost.is_none() && self.bad_header_log.allow() {
            tracing::warn!(header = %name, value = ?value,
                suppressed = self.bad_header_log.take_suppressed(),
                "upstream cost header ignored: not an integer from 0 to 1000000");
        }
        cost
    }
}

impl PriceTable {
    fn from_config(config: &PricingConfig) -> anyhow::Result<Self> {
        let mut routes: Vec<(String, i64)> = config
            .routes
            .iter()
            .map(|r| (r.prefix.clone(), r.cost))
            .collect();
        routes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        let cost_header = match &config.cost_header {
            Some(name) => Some(HeaderName::from_bytes(name.as_bytes())?),
            None => None,
        };
        Ok(Self {
            routes,
            cost_header,
            stream_usage: config.stream_usage,
        })
    }

    fn route_cost(&self, path: &str) -> i64 {
        self.routes
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map_or(1, |(_, cost)| *cost)
    }
}

/// An integer from 0 to [`MAX_REPORTED_COST`], digits only.
pub fn parse_cost(value: &HeaderValue) -> Option<i64> {
    let text = value.to_str().ok()?.trim();
    if text.is_empty() || text.len() > 7 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse()
        .ok()
        .filter(|cost| (0..=MAX_REPORTED_COST).contains(cost))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RoutePrice;

    fn pricing(routes: &[(&str, i64)], header: Option<&str>) -> Pricing {
        Pricing::from_config(&PricingConfig {
            routes: routes
                .iter()
                .map(|(p, c)| RoutePrice {
                    prefix: (*p).into(),
                    cost: *c,
                })
                .collect(),
            cost_header: header.map(Into::into),
            stream_usage: false,
        })
        .unwrap()
    }

    #[test]
    fn the_longest_matching_prefix_sets_the_price_and_others_cost_one() {
        let p = pricing(
            &[
                ("/vedic/v1/", 2),
                ("/vedic/v1/kundli", 5),
                ("/western/v1/x", 0),
            ],
            None,
        );
        assert_eq!(p.route_cost("/vedic/v1/kundli/full"), 5);
        assert_eq!(p.route_cost("/vedic/v1/panchang"), 2);
        assert_eq!(p.route_cost("/western/v1/x"), 0);
        assert_eq!(p.route_cost("/western/v1/y"), 1);
    }

    #[test]
    fn reported_costs_are_integers_up_to_a_million_and_the_header_is_removed() {
        let p = pricing(&[], Some("x-call-cost"));
        for (value, expected) in [
            ("7", Some(7)),
            ("0", Some(0)),
            ("1000000", Some(1_000_000)),
            ("1000001", None),
            ("-1", None),
            ("2.5", None),
            ("", None),
            ("12abc", None),
            ("99999999999999999999", None),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert("x-call-cost", HeaderValue::from_str(value).unwrap());
            assert_eq!(p.take_reported_cost(&mut headers), expected, "{value:?}");
            assert!(headers.is_empty(), "the header never reaches the client");
        }
    }

    #[test]
    fn replaced_prices_hold_for_the_next_call() {
        let p = pricing(&[("/vedic/v1/", 2)], None);
        p.replace(pricing(&[("/vedic/v1/kundli", 5)], Some("x-call-cost")));
        assert_eq!(p.route_cost("/vedic/v1/kundli/full"), 5);
        assert_eq!(p.route_cost("/vedic/v1/panchang"), 1);
        let mut headers = HeaderMap::new();
        headers.insert("x-call-cost", HeaderValue::from_static("9"));
        assert_eq!(p.take_reported_cost(&mut headers), Some(9));
    }
}
