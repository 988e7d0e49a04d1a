//! Changing a key once it exists (SPEC §13, §15, §16): `PATCH /account/v1/keys/{key_id}`
//! setting or clearing its monthly limit, rate limit, name, scopes or expiry. The V14
//! and V18 triggers tell every replica of the change.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Deserializer};
use utoipa::ToSchema;

use chrono::{DateTime, Utc};

use super::keys::{KeySummary, ScopePath, checked_limit, instant_or_null};
use crate::accounts::keys::{KeyChange, change_key, checked_expiry, checked_name, checked_scopes};
use crate::audit::Origin;
use crate::auth::SessionPrincipal;
use crate::error::{ApiError, ErrorBody, JsonBody, PathParams};
use crate::plan::RateLimitInput;
use crate::usage::requests::present;

use crate::state::AppState;
use crate::web::client::ClientIp;

/// The body of `PATCH /account/v1/keys/{key_id}`: every field optional, absent =
/// unchanged, `null` = cleared; at least one field present. `expires_at` must be in the
/// future: a rule against the clock the schema cannot state.
// No `min_properties = 1`: utoipa 5.5 writes it as `maxProperties`. An empty body is
// refused with 422 (scripts/schemathesis.toml expects it).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyPatch {
    /// The new limit in units per UTC month, or null to remove it.
    #[serde(default, deserialize_with = "present_whole")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub monthly_limit: Option<Option<i64>>,
    /// Calls per second through this key, or null to remove its own limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<RateLimitInput>)]
    pub rate_limit: Option<Option<RateLimitInput>>,
    /// 1 to 64 printable characters (no control character), not all blank; cannot be
    /// null.
    // The pattern is `NewKey::name`'s: `checked_name` as a regular expression.
    #[serde(default, deserialize_with = "present")]
    #[schema(
        value_type = String,
        required = false,
        min_length = 1,
        max_length = 64,
        pattern = r"^[ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub name: Option<Option<String>>,
    /// The proxied prefixes the key may call (1 to 20, repeats dropped), or null for
    /// both.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<ScopePath>>, min_items = 1, max_items = 20)]
    pub scopes: Option<Option<Vec<String>>>,
    /// RFC 3339 in the future (before year 10000 UTC), or null for never.
    #[serde(default, deserialize_with = "present_instant")]
    #[schema(value_type = Option<DateTime<Utc>>)]
    pub expires_at: Option<Option<DateTime<Utc>>>,
}

/// An instant that is present, null or not (`None` = absent: serde's default).
fn present_instant<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<DateTime<Utc>>>, D::Error> {
    instant_or_null(d).map(Some)
}

/// An integer field that is present, null or not (`None` = absent: serde's default).
fn present_whole<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    crate::json_number::whole_or_null(d).map(Some)
}

impl KeyPatch {
    /// The change asked for, each part checked; refused when it asks for nothing.
    pub fn change(self, now: DateTime<Utc>) -> Result<KeyChange, ApiError> {
        let change = KeyChange {
            name: match self.name {
                Some(Some(name)) => Some(checked_name(name)?),
                Some(None) => {
                    return Err(ApiError::Validation(
                        "name cannot be null; give 1 to 64 printable characters".into(),
                    ));
                }
                None => None,
            },
            expires_at: self
                .expires_at
                .map(|t| checked_expiry(t, now))
                .transpose()?,
            scopes: self
                .scopes
                .map(|s| s.map(checked_scopes).transpose())
                .transpose()?,
            monthly_limit: self.monthly_limit.map(checked_limit).transpose()?,
            rate_limit: self
                .rate_limit
                .map(|r| {
                    r.map(|r| r.checked("rate_limit").map_err(ApiError::Validation))
                        .transpose()
                })
                .transpose()?,
        };
        if change.is_empty() {
            return Err(ApiError::Validation(
                "give at least one of monthly_limit, rate_limit, name, scopes, expires_at".into(),
            ));
        }
        Ok(change)
    }
}

/// Changes a key's monthly limit, rate limit, name, scopes or expiry. A call through a
/// key whose month is used up is refused with `429 KEY_QUOTA_EXCEEDED`; the account's
/// other keys are unaffected. Every replica follows within a second.
#[utoipa::path(patch, path = "/account/v1/keys/{key_id}", tag = "account",
    security(("session" = [])),
    params(("key_id" = i64, Path, description = "A `key_id` of this account")),
    request_body = KeyPatch,
    responses(
        (status = 200, description = "The key as it now is", body = KeySummary),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 404, description = "KEY_NOT_FOUND: no unrevoked key of this account has this id (revoked keys are not changed)", body = ErrorBody),
        (status = 409, description = "KEY_INACTIVE: the key has expired (an expired key is not changed back to life)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: no field given, or a field out of its range (the message names it)", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn patch_key(
    State(state): State<AppState>,
    session: SessionPrincipal,
    ClientIp(ip): ClientIp,
    PathParams(key_id): PathParams<String>,
    JsonBody(patch): JsonBody<KeyPatch>,
) -> Result<Json<KeySummary>, ApiError> {
    let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
    let change = patch.change(Utc::now())?;
    Ok(Json(
        change_key(
            &state.db,
            &state.keys,
            &state.key_limits,
            session.account_id,
            key_id,
            &change,
            Origin::account(ip),
        )
        .await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_documents_the_name_a_new_key_does() {
        use utoipa::PartialSchema;
        let new = serde_json::to_value(super::super::keys::NewKey::schema()).unwrap();
        let change = serde_json::to_value(KeyPatch::schema()).unwrap();
        for field in ["pattern", "minLength", "maxLength"] {
            assert_eq!(
                new["properties"]["name"][field], change["properties"]["name"][field],
                "{field}"
            );
        }
        assert_eq!(change["properties"]["name"]["type"], "string");
    }
    use crate::plan::RateLimit;

    fn read(json: &str) -> Option<Option<i64>> {
        serde_json::from_str::<KeyPatch>(json)
            .unwrap()
            .monthly_limit
    }

    #[test]
    fn a_limit_is_set_cleared_or_missing() {
        assert_eq!(read(r#"{"monthly_limit": 5}"#), Some(Some(5)));
        assert_eq!(read(r#"{"monthly_limit": null}"#), Some(None));
        assert_eq!(read("{}"), None);
        assert!(serde_json::from_str::<KeyPatch>(r#"{"monthly_limit": 1.5}"#).is_err());
        assert!(serde_json::from_str::<KeyPatch>(r#"{"limit": 1}"#).is_err());
    }

    #[test]
    fn a_body_is_an_object_never_an_array_of_the_fields() {
        let read = |json: &str| serde_json::from_str::<crate::error::Object<KeyPatch>>(json);
        assert_eq!(
            read(r#"{"monthly_limit": 5}"#).unwrap().0.monthly_limit,
            Some(Some(5))
        );
        for not_an_object in ["[null, null]", "[5]", "[]", "null", "\"x\""] {
            let error = read(not_an_object).unwrap_err().to_string();
            assert!(
                error.contains("expected an object"),
                "{not_an_object}: {error}"
            );
        }
        // Inside the object, the derived rules still hold.
        assert!(read(r#"{"limit": 1}"#).is_err());
    }

    #[test]
    fn a_patch_asks_for_something_and_never_a_null_name() {
        let now = Utc::now();
        let patch = |json: &str| serde_json::from_str::<KeyPatch>(json).unwrap().change(now);
        assert!(patch("{}").is_err());
        assert!(patch(r#"{"name": null}"#).is_err());
        let change = patch(r#"{"scopes": null, "rate_limit": {"per_second": 5}}"#).unwrap();
        assert_eq!(change.scopes, Some(None));
        assert_eq!(
            change.rate_limit,
            Some(Some(RateLimit {
                per_second: 5,
                burst: 5
            }))
        );
        assert_eq!(change.name, None);
        assert!(patch(r#"{"expires_at": "2000-01-01T00:00:00Z"}"#).is_err());
        let change = patch(r#"{"expires_at": "2999-01-01T01:00:00+01:00"}"#).unwrap();
        assert_eq!(
            change.expires_at,
            Some(Some("2999-01-01T00:00:00Z".parse().unwrap()))
        );
        assert_eq!(
            patch(r#"{"expires_at": null}"#).unwrap().expires_at,
            Some(None)
        );
        for bad in [r#""""#, r#""2027-06-30""#, "5", "[]"] {
            let body = format!(r#"{{"expires_at": {bad}}}"#);
            let error = serde_json::from_str::<KeyPatch>(&body)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("expected an RFC 3339 date and time, or null"),
                "{bad}: {error}"
            );
        }
        assert!(patch(r#"{"scopes": ["/lunar/v1/"]}"#).is_err());
    }

    #[test]
    fn limits_outside_the_range_are_refused() {
        use super::super::keys::MAX_KEY_LIMIT;
        assert!(checked_limit(Some(-1)).is_err());
        assert!(checked_limit(Some(MAX_KEY_LIMIT + 1)).is_err());
        assert_eq!(checked_limit(Some(0)).unwrap(), Some(0));
        assert_eq!(checked_limit(None).unwrap(), None);
    }
}
