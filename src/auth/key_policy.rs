//! What a key may do besides proving who calls (SPEC §15, §16): when it expires, which
//! proxied paths it may call, and its own rate limit. Read with the key and cached with
//! it, so checking it per call costs a comparison or two and no round trip; the V18
//! trigger tells every replica's cache when any of it changes.

use chrono::{DateTime, Utc};

use crate::plan::RateLimit;

/// The proxied prefixes every key may call unless its scopes say otherwise.
pub const ALL_SCOPES: [&str; 2] = ["/vedic/v1/", "/western/v1/"];

/// A key's expiry, scopes and rate limit. Keys with none of them carry no policy at all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyPolicy {
    pub expires_at: Option<DateTime<Utc>>,
    /// The paths the key may call; `None` = every proxied path.
    pub scopes: Option<Box<[String]>>,
    pub rate_limit: Option<RateLimit>,
}

impl KeyPolicy {
    /// The policy of a key row, or `None` when the key is unrestricted.
    pub fn of(
        expires_at: Option<DateTime<Utc>>,
        scopes: Option<Vec<String>>,
        rate_limit: Option<RateLimit>,
    ) -> Option<KeyPolicy> {
        let policy = KeyPolicy {
            expires_at,
            scopes: scopes.map(Vec::into_boxed_slice),
            rate_limit,
        };
        (policy != KeyPolicy::default()).then_some(policy)
    }

    /// Whether the key has expired at `now` (its expiry instant is no longer valid).
    pub fn expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|end| end <= now)
    }

    /// Whether the key may call `path`.
    pub fn allows(&self, path: &str) -> bool {
        self.scopes
            .as_deref()
            .is_none_or(|scopes| scopes.iter().any(|scope| in_scope(path, scope)))
    }
}

/// Whether `path` is `scope` or lies under it. A scope ending in `/` covers everything
/// after it; any other scope covers itself and the paths below it, never a longer name
/// (`/vedic/v1/chart` covers `/vedic/v1/chart/d9`, not `/vedic/v1/charts`).
pub fn in_scope(path: &str, scope: &str) -> bool {
    match path.strip_prefix(scope) {
        Some(rest) => scope.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scoped(scopes: &[&str]) -> KeyPolicy {
        KeyPolicy {
            scopes: Some(scopes.iter().map(|s| (*s).to_owned()).collect()),
            ..KeyPolicy::default()
        }
    }

    #[test]
    fn a_scope_covers_its_path_and_what_lies_under_it() {
        let key = scoped(&["/vedic/v1/chart", "/western/v1/"]);
        assert!(key.allows("/vedic/v1/chart"));
        assert!(key.allows("/vedic/v1/chart/d9"));
        assert!(key.allows("/western/v1/synastry"));
        assert!(!key.allows("/vedic/v1/charts"));
        assert!(!key.allows("/vedic/v1/dasha"));
        assert!(KeyPolicy::default().allows("/vedic/v1/anything"));
    }

    #[test]
    fn a_key_expires_at_its_instant() {
        let end = DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let key = KeyPolicy {
            expires_at: Some(end),
            ..KeyPolicy::default()
        };
        assert!(!key.expired(end - chrono::Duration::milliseconds(1)));
        assert!(key.expired(end));
    }

    #[test]
    fn an_unrestricted_key_has_no_policy() {
        assert_eq!(KeyPolicy::of(None, None, None), None);
        assert!(KeyPolicy::of(None, Some(vec!["/vedic/v1/".into()]), None).is_some());
    }
}
