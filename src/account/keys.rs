//! API-key management: create (at most `account.max_keys` live, with a name, expiry,
//! scopes and limits), list (paged, with each key's use this month and last use), roll,
//! revoke. Changing a key is in [`super::key_limit`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::{CONTENT_TYPE, LINK};
use axum::http::{HeaderMap, HeaderValue, StatusCode};

use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::{self, DeserializeOwned, Visitor};
use serde::{Deserialize, Deserializer};
use utoipa::{IntoParams, ToSchema};

use crate::accounts::keys::{
    DEFAULT_GRACE_SECONDS, DEFAULT_KEY_NAME, KeyRoll, KeySettings, checked_expiry, checked_name,
    checked_scopes, revoke, roll,
};
pub use crate::accounts::keys::{
    KeyCreated, KeyRolled, KeySummary, MAX_KEY_LIMIT, checked_limit, create_account_key, keys_of,
};
use crate::audit::Origin;
use crate::auth::SessionPrincipal;
use crate::error::{ApiError, ErrorBody, Object, PathParams, QueryParams};
use crate::plan::RateLimitInput;
use crate::state::AppState;
use crate::web::client::ClientIp;

/// The optional body of `POST /account/v1/keys`; every field may be left out.
/// `expires_at` must be in the future: a rule against the clock the schema cannot state.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// 1 to 64 printable characters (no control character), not all blank; `default`
    /// when left out.
    // The pattern is `checked_name` as a regular expression: blanks that are not control
    // characters, one character that is neither, then any that are not control characters.
    #[schema(
        example = "ci-runner",
        min_length = 1,
        max_length = 64,
        pattern = r"^[ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub name: Option<String>,
    /// RFC 3339, in the future (before year 10000 UTC); absent or null = never.
    #[serde(default, deserialize_with = "instant_or_null")]
    #[schema(example = "2027-06-30T00:00:00Z")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The proxied prefixes the key may call (1 to 20, repeats dropped), each
    /// `/vedic/v1/`, `/western/v1/` or a path under one of them; absent or null = both.
    #[schema(value_type = Option<Vec<ScopePath>>, min_items = 1, max_items = 20, example = json!(["/vedic/v1/"]))]
    pub scopes: Option<Vec<String>>,
    /// Units per UTC month this key may use; absent or null = no limit of its own.
    #[serde(default, deserialize_with = "crate::json_number::whole_or_null")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub monthly_limit: Option<i64>,
    /// Calls per second through this key, on top of the account's; null = none.
    #[schema(value_type = Option<RateLimitInput>)]
    pub rate_limit: Option<RateLimitInput>,
}

/// A scope of a key (SPEC §15): `/vedic/v1/` or `/western/v1/`, or a longer path under
/// one of them, of at most 256 printable ASCII characters: no empty, `.` or `..` segment
/// but the last may be empty (a scope ending in `/`), no blank, `?`, `#` or `\`.
// Only the document's: the handlers read scopes as strings and check them with
// `checked_scopes`, whose rule the pattern states (held to it by a property test).
#[derive(ToSchema)]
#[schema(
    pattern = r#"^(?=.{1,256}$)/(?:vedic|western)/v1/(?:(?!\.\.?/)[!"$-.0->@-\[\]-~]+/)*(?!\.\.?$)[!"$-.0->@-\[\]-~]*$"#,
    example = "/vedic/v1/chart"
)]
pub struct ScopePath(pub String);

impl NewKey {
    /// The key settings asked for, each checked.
    pub fn settings(self, now: DateTime<Utc>) -> Result<KeySettings, ApiError> {
        Ok(KeySettings {
            name: match self.name {
                Some(name) => checked_name(name)?,
                None => DEFAULT_KEY_NAME.to_owned(),
            },
            expires_at: checked_expiry(self.expires_at, now)?,
            scopes: self.scopes.map(checked_scopes).transpose()?,
            monthly_limit: checked_limit(self.monthly_limit)?,
            rate_limit: self
                .rate_limit
                .map(|r| r.checked("rate_limit").map_err(ApiError::Validation))
                .transpose()?,
        })
    }
}

/// The body of `POST /account/v1/keys/{key_id}/roll`; may be left out.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollKey {
    /// Seconds the old key keeps working, 0 to 604800; 86400 when left out.
    #[serde(default, deserialize_with = "crate::json_number::whole_or_null")]
    #[schema(minimum = 0, maximum = 604800, example = 3600)]
    pub grace_seconds: Option<i64>,
}

/// An RFC 3339 instant or null (`#[serde(default, deserialize_with = ...)]`), read as
/// chrono reads one, but refused in the product's words ("expires_at must be an RFC 3339
/// date and time, or null"), not the date parser's ("premature end of input").
pub(crate) fn instant_or_null<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    struct Instant;

    impl<'de> Visitor<'de> for Instant {
        type Value = Option<DateTime<Utc>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an RFC 3339 date and time, or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            text.parse()
                .map(Some)
                .map_err(|_| E::invalid_value(de::Unexpected::Str(text), &self))
        }
    }

    deserializer.deserialize_option(Instant)
}

/// An optional JSON body: empty (or `null`) is `T::default()`; anything else must be a
/// JSON object, within the route's size.
fn optional_json<T: Default + DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge,
        _ => ApiError::BadRequestBody,
    })?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .is_some_and(|v| v == "application/json" || v.ends_with("+json"));
    if !json {
        return Err(ApiError::UnsupportedMediaType);
    }
    // `null` asks for nothing, as an empty body does.
    Ok(Json::<Option<Object<T>>>::from_bytes(&body)?
        .0
        .map(|Object(body)| body)
        .unwrap_or_default())
}

/// Creates another API key; the response is the only time it is shown. An account holds
/// at most `account.max_keys` unrevoked keys: the count is taken under the account's
/// row lock, so concurrent creations cannot pass it together.
#[utoipa::path(post, path = "/account/v1/keys", tag = "account",
    security(("session" = [])),
    request_body(content = Option<NewKey>, description = "Optional; an empty body (or `null`) makes a key without a limit"),
    responses(
        (status = 201, description = "The new key; `api_key` is shown this once", body = KeyCreated),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: a body whose content-type is not application/json", body = ErrorBody),
        (status = 409, description = "KEY_LIMIT: the account holds `account.max_keys` unrevoked keys", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: a field is out of its range (the message names it)", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn create_key(
    State(state): State<AppState>,
    session: SessionPrincipal,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<KeyCreated>), ApiError> {
    let request: NewKey = optional_json(&headers, body)?;
    let settings = request.settings(Utc::now())?;
    let created = create_account_key(
        &state.db,
        session.account_id,
        state.config.account.max_keys,
        &settings,
        Origin::account(ip),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Rolls a key: a new key with the old one's name, scopes and limits, shown once; the
/// old key keeps working for `grace_seconds` (or until its own earlier expiry), so the
/// customer's services can move over without a moment of refusals.
#[utoipa::path(post, path = "/account/v1/keys/{key_id}/roll", tag = "account",
    security(("session" = [])),
    params(("key_id" = i64, Path, description = "A `key_id` of this account")),
    request_body(content = Option<RollKey>, description = "Optional; an empty body gives the old key a day"),
    responses(
        (status = 201, description = "The new key; `api_key` is shown this once", body = KeyRolled),
        (status = 400, description = "MALFORMED_JSON: the body is not JSON", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 404, description = "KEY_NOT_FOUND: no key of this account has this id", body = ErrorBody),
        (status = 409, description = "KEY_INACTIVE: the key is revoked or expired; KEY_LIMIT: the account's other live keys number `account.max_keys`", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: the body exceeds 16 KiB", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: a body whose content-type is not application/json", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `grace_seconds` is not an integer from 0 to 604800", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn roll_key(
    State(state): State<AppState>,
    session: SessionPrincipal,
    ClientIp(ip): ClientIp,
    PathParams(key_id): PathParams<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<KeyRolled>), ApiError> {
    let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
    let request: RollKey = optional_json(&headers, body)?;
    let request = KeyRoll {
        key_id,
        grace_seconds: request.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS),
    };
    let rolled = roll(
        &state.db,
        &state.keys,
        session.account_id,
        request,
        state.config.account.max_keys,
        Origin::account(ip),
        Utc::now(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(rolled)))
}

/// Keys per page of [`list_keys`] when `?limit=` is absent.
const DEFAULT_PAGE: u32 = 100;
/// Most keys one page holds.
pub(crate) const MAX_PAGE: u32 = 1000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct KeyPage {
    /// Keys per page, 1-1000; 100 when absent.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// Only keys with a larger `key_id` (the last one of the previous page).
    pub after: Option<i64>,
}

/// Lists the account's keys, revoked ones included, in `key_id` order (oldest first),
/// a page at a time. When more follow, `Link: <...>; rel="next"` names the next page.
#[utoipa::path(get, path = "/account/v1/keys", tag = "account",
    security(("session" = [])),
    params(KeyPage),
    responses(
        (status = 200, description = "Every key of the account, revoked ones included", body = [KeySummary]),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 422, description = "VALIDATION_FAILED: `limit` must be 1 to 1000, `after` a key id", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn list_keys(
    State(state): State<AppState>,
    session: SessionPrincipal,
    QueryParams(page): QueryParams<KeyPage>,
) -> Result<(HeaderMap, Json<Vec<KeySummary>>), ApiError> {
    let limit = page.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::Validation(format!("limit must be 1-{MAX_PAGE}")));
    }
    let mut keys = keys_of(
        &state.db,
        session.account_id,
        page.after.unwrap_or(i64::MIN),
        i64::from(limit) + 1,
    )
    .await?;
    let mut headers = HeaderMap::new();
    if keys.len() > limit as usize {
        keys.truncate(limit as usize);
        let last = keys.last().map_or(0, |k| k.key_id);
        let next = format!("</account/v1/keys?limit={limit}&after={last}>; rel=\"next\"");
        if let Ok(value) = HeaderValue::from_str(&next) {
            headers.insert(LINK, value);
        }
    }
    Ok((headers, Json(keys)))
}

/// Revokes a key; it is refused from the next call on. Revoking a revoked key changes
/// nothing (still `204`): its revocation time stays, and no cache hears of it.
#[utoipa::path(delete, path = "/account/v1/keys/{key_id}", tag = "account",
    security(("session" = [])),
    params(("key_id" = i64, Path, description = "A `key_id` of this account")),
    responses(
        (status = 204, description = "Revoked (or already revoked)"),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 404, description = "KEY_NOT_FOUND: no key of this account has this id (any id that is not an integer included)", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn revoke_key(
    State(state): State<AppState>,
    session: SessionPrincipal,
    ClientIp(ip): ClientIp,
    PathParams(key_id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
    let origin = Origin::account(ip);
    revoke(&state.db, &state.keys, session.account_id, key_id, origin).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The documented name and scope patterns are `checked_name`'s and `checked_scopes`'
/// rules, checked with the engine the fuzz suite validates with.
#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use utoipa::PartialSchema;

    use super::*;
    use crate::accounts::keys::{MAX_KEY_NAME_CHARS, MAX_SCOPE_BYTES};
    use crate::prop_support::{pattern_at, space};

    /// The patterns as `/openapi.json` states them, compiled once.
    fn name_pattern() -> &'static fancy_regex::Regex {
        static PATTERN: std::sync::LazyLock<fancy_regex::Regex> = std::sync::LazyLock::new(|| {
            let schema = serde_json::to_value(NewKey::schema()).unwrap();
            pattern_at(&schema, "/properties/name/pattern")
        });
        &PATTERN
    }

    fn scope_pattern() -> &'static fancy_regex::Regex {
        static PATTERN: std::sync::LazyLock<fancy_regex::Regex> = std::sync::LazyLock::new(|| {
            let schema = serde_json::to_value(ScopePath::schema()).unwrap();
            pattern_at(&schema, "/pattern")
        });
        &PATTERN
    }

    fn name_char() -> impl Strategy<Value = char> {
        prop_oneof![
            8 => prop::sample::select(vec!['c', 'I', '-', '_', ' ', '.', 'é', 'İ', '7', '😀']),
            3 => space(),
            1 => prop::sample::select(vec!['\0', '\u{1}', '\u{1f}', '\u{7f}', '\u{9f}', '\u{a0}']),
            1 => any::<char>(),
        ]
    }

    fn name_like() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::collection::vec(name_char(), 0..8).prop_map(String::from_iter),
            1 => (MAX_KEY_NAME_CHARS - 2..=MAX_KEY_NAME_CHARS + 2, name_char())
                .prop_map(|(n, c)| format!("{c}{}", "é".repeat(n - 1))),
        ]
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(vec![
                "chart", "", ".", "..", "...", ".x", "a b", "x?y", "x#", "a\\b", "é", "\t",
                "~!$&'()*+,;=:@[]\"<>^`{|}%", "-", "v1",
            ])
            .prop_map(str::to_owned),
            1 => prop::collection::vec(any::<char>(), 0..4).prop_map(String::from_iter),
            1 => (200..=MAX_SCOPE_BYTES).prop_map(|n| "x".repeat(n)),
        ]
    }

    fn scope_like() -> impl Strategy<Value = String> {
        let prefix = prop::sample::select(vec![
            "/vedic/v1/",
            "/western/v1/",
            "/vedic/v1",
            "/vedic/v2/",
            "/lunar/v1/",
            "vedic/v1/",
            "",
        ]);
        (prefix, prop::collection::vec(segment(), 0..4))
            .prop_map(|(prefix, segments)| format!("{prefix}{}", segments.join("/")))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn the_documented_name_pattern_is_the_handlers_rule(name in name_like()) {
            let count = name.chars().count();
            let documented = name_pattern().is_match(&name).unwrap()
                && (1..=MAX_KEY_NAME_CHARS).contains(&count);
            prop_assert_eq!(documented, checked_name(name.clone()).is_ok(), "{:?}", name);
        }

        #[test]
        fn the_documented_scope_pattern_is_the_handlers_rule(scope in scope_like()) {
            let documented = scope_pattern().is_match(&scope).unwrap();
            prop_assert_eq!(
                documented,
                checked_scopes(vec![scope.clone()]).is_ok(),
                "{:?}",
                scope
            );
        }
    }
}
