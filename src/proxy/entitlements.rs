//! Which routes need which plan feature (SPEC §17): the longest matching prefix of
//! `entitlements.routes`; a path under none needs nothing.

use percent_encoding::percent_decode_str;

use crate::config::EntitlementsConfig;

/// The configured routes, longest prefix first.
#[derive(Debug, Default)]
pub struct Entitlements {
    routes: Vec<(String, String)>,
}

impl Entitlements {
    pub fn from_config(config: &EntitlementsConfig) -> Self {
        let mut routes: Vec<(String, String)> = config
            .routes
            .iter()
            .map(|r| (r.prefix.clone(), r.feature.clone()))
            .collect();
        routes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Self { routes }
    }

    /// The feature a call to `path` needs, if any. A path with percent-escapes is also
    /// matched decoded, so `/western/v1/%73ynastry/` needs what `/western/v1/synastry/`
    /// needs: an upstream that decodes would serve it as that.
    pub fn feature_of(&self, path: &str) -> Option<&str> {
        if self.routes.is_empty() {
            return None;
        }
        let matching = |path: &str| {
            self.routes
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
            .map(|(_, feature)| feature.as_str())
    }

    /// The configured prefixes (the routes analytics name).
    pub fn prefixes(&self) -> impl Iterator<Item = &str> {
        self.routes.iter().map(|(prefix, _)| prefix.as_str())
    }
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
}
