//! A key's own monthly limit (SPEC §13), once the key exists:
//! `PATCH /account/v1/keys/{key_id}` setting or clearing it. The V14 trigger tells every
//! replica's [`crate::usage::key_limits::KeyLimits`] of the change.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Deserializer};
use utoipa::ToSchema;

use super::keys::{KeySummary, checked_limit};
use crate::accounts::keys::set_key_limit;
use crate::auth::SessionPrincipal;
use crate::error::{ApiError, ErrorBody, JsonBody, PathParams};

use crate::state::AppState;

/// The body of `PATCH /account/v1/keys/{key_id}` (as documented; read as
/// [`KeyLimitChangeBody`], which tells a null limit from a missing one).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyLimitChange {
    /// The new limit in units per UTC month, or null to remove it. Required.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, required = true, minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub monthly_limit: Option<Option<i64>>,
}

/// A field that is present, null or not (`None` = absent: serde's default).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    crate::json_number::whole_or_null(d).map(Some)
}

impl<'de> Deserialize<'de> for KeyLimitChangeBody {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        KeyLimitChange::deserialize(d).map(|c| KeyLimitChangeBody(c.monthly_limit))
    }
}

/// [`KeyLimitChange`] as read: `None` when `monthly_limit` is missing.
pub struct KeyLimitChangeBody(Option<Option<i64>>);

/// Sets or clears a key's monthly limit. A call through a key whose month is used up is
/// refused with `429 KEY_QUOTA_EXCEEDED`; the account's other keys are unaffected.
#[utoipa::path(patch, path = "/account/v1/keys/{key_id}", tag = "account",
    security(("session" = [])),
    params(("key_id" = i64, Path, description = "A `key_id` of this account")),
    request_body = KeyLimitChange,
    responses(
        (status = 200, description = "The key with its new limit", body = KeySummary),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 404, description = "KEY_NOT_FOUND: no live key of this account has this id (revoked keys take no limit)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `monthly_limit` missing, or not null nor an integer >= 0", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn patch_key(
    State(state): State<AppState>,
    session: SessionPrincipal,
    PathParams(key_id): PathParams<String>,
    JsonBody(change): JsonBody<KeyLimitChangeBody>,
) -> Result<Json<KeySummary>, ApiError> {
    let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
    let Some(limit) = change.0 else {
        return Err(ApiError::Validation(
            "monthly_limit is required (a number, or null to remove the limit)".into(),
        ));
    };
    let limit = checked_limit(limit)?;
    Ok(Json(
        set_key_limit(
            &state.db,
            &state.key_limits,
            session.account_id,
            key_id,
            limit,
        )
        .await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Option<Option<i64>> {
        serde_json::from_str::<KeyLimitChangeBody>(json).unwrap().0
    }

    #[test]
    fn a_limit_is_set_cleared_or_missing() {
        assert_eq!(read(r#"{"monthly_limit": 5}"#), Some(Some(5)));
        assert_eq!(read(r#"{"monthly_limit": null}"#), Some(None));
        assert_eq!(read("{}"), None);
        assert!(serde_json::from_str::<KeyLimitChangeBody>(r#"{"monthly_limit": 1.5}"#).is_err());
        assert!(serde_json::from_str::<KeyLimitChangeBody>(r#"{"limit": 1}"#).is_err());
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
