//! The route a call counts under in the rollup (SPEC §18): the longest prefix among
//! `pricing.routes` and `entitlements.routes`, else the path's first three segments
//! (`/vedic/v1/chart`); past `analytics.max_routes` distinct routes of an account in a
//! month, `other`. A reload that changes those prefixes names the calls after it by the
//! new ones (SPEC §20).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use arc_swap::ArcSwap;

use crate::config::Config;
use crate::month::Month;
use crate::sync::lock;

/// The route of calls past the bound.
pub const OTHER: &str = "other";
/// Longest route name kept, in bytes.
const MAX_ROUTE_BYTES: usize = 256;
/// Account-months whose routes are remembered at most; a full memory starts over.
const MAX_REMEMBERED: usize = 100_000;

/// The route prefixes of `pricing.routes` and `entitlements.routes`.
fn configured_prefixes(config: &Config) -> impl Iterator<Item = String> + '_ {
    let priced = config.pricing.routes.iter().map(|r| r.prefix.clone());
    priced.chain(config.entitlements.routes.iter().map(|r| r.prefix.clone()))
}

fn longest_first(prefixes: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut prefixes: Vec<String> = prefixes.into_iter().collect();
    prefixes.sort_by_key(|p| std::cmp::Reverse(p.len()));
    prefixes.dedup();
    prefixes
}

/// How routes are named, and which routes each account-month is known to have.
#[derive(Debug, Default)]
pub struct RouteBook {
    /// Configured prefixes, longest first.
    prefixes: ArcSwap<Vec<String>>,
    pub max_routes: usize,
    /// Routes known to be in `usage_route`, by account and month (only ever a subset of
    /// the table: routes are never removed).
    known: Mutex<HashMap<(i64, Month), HashSet<String>>>,
}

impl RouteBook {
    pub fn new(prefixes: impl IntoIterator<Item = String>, max_routes: usize) -> Self {
        Self {
            prefixes: ArcSwap::from_pointee(longest_first(prefixes)),
            max_routes,
            known: Mutex::default(),
        }
    }

    /// The book of a configuration's route prefixes and bound.
    pub fn from_config(config: &Config) -> Self {
        Self::new(configured_prefixes(config), config.analytics.max_routes)
    }

    /// Names the calls from now on after `config`'s prefixes (the bound and what is
    /// known of each account-month stay).
    pub fn replace_prefixes(&self, config: &Config) {
        self.prefixes
            .store(longest_first(configured_prefixes(config)).into());
    }

    /// The route name of a path (before the bound).
    pub fn name_of(&self, path: &str) -> String {
        let prefixes = self.prefixes.load();
        if let Some(prefix) = prefixes.iter().find(|p| path.starts_with(p.as_str())) {
            return prefix.clone();
        }
        let end = path
            .match_indices('/')
            .nth(3)
            .map_or(path.len(), |(i, _)| i);
        let mut name = &path[..end];
        if name.len() > MAX_ROUTE_BYTES {
            let cut = (0..=MAX_ROUTE_BYTES)
                .rev()
                .find(|i| name.is_char_boundary(*i))
                .unwrap_or(0);
            name = &name[..cut];
        }
        name.to_owned()
    }

    /// Whether every one of `routes` is known for the account-month.
    pub(super) fn all_known(&self, account_id: i64, month: Month, routes: &HashSet<&str>) -> bool {
        let known = lock(&self.known);
        known
            .get(&(account_id, month))
            .is_some_and(|set| routes.iter().all(|r| set.contains(*r)))
    }

    /// Replaces what is known of an account-month with what the table holds.
    pub(super) fn learn(&self, account_id: i64, month: Month, routes: HashSet<String>) {
        let mut known = lock(&self.known);
        if known.len() >= MAX_REMEMBERED {
            known.clear();
        }
        known.insert((account_id, month), routes);
    }

    /// The routes known of an account-month.
    pub(super) fn known(&self, account_id: i64, month: Month) -> HashSet<String> {
        lock(&self.known)
            .get(&(account_id, month))
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_prefix_names_the_route_else_three_segments() {
        let book = RouteBook::new(["/western/v1/synastry/".to_owned()], 100);
        assert_eq!(
            book.name_of("/western/v1/synastry/report"),
            "/western/v1/synastry/"
        );
        assert_eq!(book.name_of("/vedic/v1/chart/d9/x"), "/vedic/v1/chart");
        assert_eq!(book.name_of("/vedic/v1/chart"), "/vedic/v1/chart");
        assert_eq!(book.name_of("/vedic/v1"), "/vedic/v1");
        assert!(
            book.name_of(&format!("/vedic/v1/{}", "é".repeat(300)))
                .len()
                <= 256
        );
    }

    #[test]
    fn replaced_prefixes_name_the_next_calls() {
        let book = RouteBook::new(["/western/v1/synastry/".to_owned()], 100);
        let mut config = Config::default();
        config.pricing.routes = vec![crate::config::RoutePrice {
            prefix: "/vedic/v1/kundli".into(),
            cost: 5,
        }];
        book.replace_prefixes(&config);
        assert_eq!(book.name_of("/vedic/v1/kundli/full"), "/vedic/v1/kundli");
        assert_eq!(
            book.name_of("/western/v1/synastry/report"),
            "/western/v1/synastry"
        );
        assert_eq!(book.max_routes, 100);
    }
}
