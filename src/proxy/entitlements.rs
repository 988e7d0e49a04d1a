//! Which routes need which plan feature (SPEC §17): the longest matching prefix of
//! `entitlements.routes`; a path under none needs nothing. A reload replaces the routes
//! at once (SPEC §20): each call's lookup takes one `ArcSwap` load, no lock.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use arc_swap::ArcSwap;
use percent_encoding::percent_decode_str;

use crate::config::EntitlementsConfig;
use crate::sync::lock;

/// The configured routes, as the last load or reload set them.
#[derive(Debug, Default)]
pub struct Entitlements {
    /// Longest prefix first.
    routes: ArcSwap<Vec<(String, &'static str)>>,
}

impl Entitlements {
    pub fn from_config(config: &EntitlementsConfig) -> Self {
        let mut routes: Vec<(String, &'static str)> = config
            .routes
            .iter()
            .map(|r| (r.prefix.clone(), kept(&r.feature)))
            .collect();
        routes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Self {
            routes: ArcSwap::from_pointee(routes),
        }
    }

    /// Puts `new`'s routes in force for every call from now on.
    pub fn replace(&self, new: Entitlements) {
        self.routes.store(new.routes.into_inner());
    }

    /// The feature a call to `path` needs, if any. A path with percent-escapes is also
    /// matched decoded, so `/western/v1/%73ynastry/` needs what `/western/v1/synastry/`
    /// needs: an upstream that decodes would serve it as that.
    pub fn feature_of(&self, path: &str) -> Option<&str> {
        let routes = self.routes.load();
        if routes.is_empty() {
            return None;
        }
        let matching = |path: &str| {
            routes
                .iter()
                .find(|(prefix, _)| path.starts_with(prefix.as_str()))
        };
        let raw = matching(path);
        let decoded = if path.contains('%') {
            matching(&percent_decode_str(path).decode_utf8_lossy())
        } else {
            None
        };
        // The longer of the two matches: the routes are longest first, so each is its
        // path's own longest.
        [raw, decoded]
            .into_iter()
            .flatten()
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, feature)| *feature)
    }
}

/// `feature` as a name that lives as long as the process, so a call keeps the name it
/// matched while a reload swaps the routes. Each distinct name is kept once: names are
/// checked (at most 64 characters) and an operator configures a handful.
fn kept(feature: &str) -> &'static str {
    static NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);
    let mut names = lock(&NAMES);
    if let Some(name) = names.get(feature) {
        return name;
    }
    let name: &'static str = Box::leak(feature.into());
    names.insert(name);
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FeatureRoute;

    #[test]
    fn the_longest_prefix_names_the_feature() {
        let entitlements = Entitlements::from_config(&EntitlementsConfig {
            routes: vec![
                FeatureRoute {
                    prefix: "/western/v1/".into(),
                    feature: "western".into(),
                },
                FeatureRoute {
                    prefix: "/western/v1/synastry/".into(),
                    feature: "synastry".into(),
                },
            ],
        });
        assert_eq!(
            entitlements.feature_of("/western/v1/synastry/report"),
            Some("synastry")
        );
        assert_eq!(
            entitlements.feature_of("/western/v1/chart"),
            Some("western")
        );
        assert_eq!(entitlements.feature_of("/vedic/v1/chart"), None);
        assert_eq!(
            entitlements.feature_of("/western/v1/%73ynastry/report"),
            Some("synastry"),
            "an escaped path needs what it decodes to"
        );
    }

    #[test]
    fn replaced_routes_hold_for_the_next_call() {
        let route = |prefix: &str, feature: &str| FeatureRoute {
            prefix: prefix.into(),
            feature: feature.into(),
        };
        let entitlements = Entitlements::from_config(&EntitlementsConfig {
            routes: vec![route("/western/v1/", "western")],
        });
        entitlements.replace(Entitlements::from_config(&EntitlementsConfig {
            routes: vec![route("/vedic/v1/kundli", "kundli")],
        }));
        assert_eq!(entitlements.feature_of("/western/v1/chart"), None);
        assert_eq!(
            entitlements.feature_of("/vedic/v1/kundli/full"),
            Some("kundli")
        );
        // One name, whichever reload brought it.
        assert!(std::ptr::eq(kept("kundli"), kept("kundli")));
    }
}
