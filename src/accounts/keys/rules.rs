//! What a key may be made with: its name, expiry, scopes and limits, checked.

use chrono::{DateTime, Utc};

use crate::auth::key_policy::ALL_SCOPES;
use crate::error::ApiError;
use crate::plan::RateLimit;

/// Largest limit a key takes (far beyond any month's use; keeps sums in `bigint`).
pub const MAX_KEY_LIMIT: i64 = 1_000_000_000_000;

/// A limit as given, checked: `0..=MAX_KEY_LIMIT`, or none.
pub fn checked_limit(limit: Option<i64>) -> Result<Option<i64>, ApiError> {
    match limit {
        Some(n) if !(0..=MAX_KEY_LIMIT).contains(&n) => Err(ApiError::Validation(format!(
            "monthly_limit must be an integer from 0 to {MAX_KEY_LIMIT}, or null"
        ))),
        other => Ok(other),
    }
}

/// What a key is made with (SPEC §13, §15, §16), each part checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySettings {
    pub name: String,
    pub expires_at: Option<DateTime<Utc>>,
    /// `None`: every proxied path.
    pub scopes: Option<Vec<String>>,
    pub monthly_limit: Option<i64>,
    pub rate_limit: Option<RateLimit>,
}

impl Default for KeySettings {
    fn default() -> Self {
        Self {
            name: DEFAULT_KEY_NAME.to_owned(),
            expires_at: None,
            scopes: None,
            monthly_limit: None,
            rate_limit: None,
        }
    }
}

/// The name of signup's key, and of keys made without one.
pub const DEFAULT_KEY_NAME: &str = "default";
/// Longest key name, in characters.
pub const MAX_KEY_NAME_CHARS: usize = 64;
/// Most scopes one key lists.
pub const MAX_SCOPES: usize = 20;
/// Longest scope, in bytes.
pub const MAX_SCOPE_BYTES: usize = 256;
/// Longest grace a rolled key's predecessor gets (a week), and the default (a day).
pub const MAX_GRACE_SECONDS: i64 = 604_800;
pub const DEFAULT_GRACE_SECONDS: i64 = 86_400;

/// A key name as given, checked: 1 to 64 printable characters, not all blank.
pub fn checked_name(name: String) -> Result<String, ApiError> {
    let count = name.chars().count();
    if count == 0
        || count > MAX_KEY_NAME_CHARS
        || name.trim().is_empty()
        || name.chars().any(char::is_control)
    {
        return Err(ApiError::Validation(format!(
            "name must be 1 to {MAX_KEY_NAME_CHARS} printable characters"
        )));
    }
    Ok(name)
}

/// An expiry as given, checked: after `now`, and storable.
pub fn checked_expiry(
    expires_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    match expires_at {
        Some(t) if t <= now || !crate::month::storable(t) => Err(ApiError::Validation(
            "expires_at must be an RFC 3339 instant in the future (before year 10000), or null"
                .into(),
        )),
        other => Ok(other),
    }
}

/// Scopes as given, checked: a non-empty list of at most [`MAX_SCOPES`] paths, each
/// `/vedic/v1/` or `/western/v1/` or a longer path under one of them (no empty, `.` or
/// `..` segment, no query, no blanks), without repeats.
pub fn checked_scopes(scopes: Vec<String>) -> Result<Vec<String>, ApiError> {
    let refuse = |why: String| Err(ApiError::Validation(why));
    if scopes.is_empty() || scopes.len() > MAX_SCOPES {
        return refuse(format!("scopes must list 1 to {MAX_SCOPES} paths"));
    }
    let mut kept: Vec<String> = Vec::with_capacity(scopes.len());
    for scope in scopes {
        let under = ALL_SCOPES.iter().find_map(|p| scope.strip_prefix(p));
        let valid = scope.len() <= MAX_SCOPE_BYTES
            && under.is_some_and(|rest| {
                rest.split('/').enumerate().all(|(i, segment)| {
                    // Only the last segment may be empty (a scope ending in `/`).
                    let last = i == rest.split('/').count() - 1;
                    (last || !segment.is_empty())
                        && segment != "."
                        && segment != ".."
                        && segment
                            .bytes()
                            .all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'\\'))
                })
            });
        if !valid {
            return refuse(format!(
                "scopes: each must be /vedic/v1/ or /western/v1/ or a path under one of them \
                 (at most {MAX_SCOPE_BYTES} characters, no query)"
            ));
        }
        if !kept.contains(&scope) {
            kept.push(scope);
        }
    }
    Ok(kept)
}
