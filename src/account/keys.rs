//! API-key management: create (at most `account.max_keys` unrevoked, optionally with a
//! monthly limit), list (paged, with each key's use this month), revoke. Changing a
//! key's limit is in [`super::key_limit`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::{CONTENT_TYPE, LINK};
use axum::http::{HeaderMap, HeaderValue, StatusCode};

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::accounts::keys::revoke;
pub use crate::accounts::keys::{
    KeyCreated, KeySummary, MAX_KEY_LIMIT, checked_limit, create_account_key, keys_of,
};
use crate::auth::SessionPrincipal;
use crate::error::{ApiError, ErrorBody, PathParams, QueryParams};
use crate::state::AppState;

/// The optional body of `POST /account/v1/keys`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// Units per UTC month this key may use; absent or null = no limit of its own.
    #[serde(default, deserialize_with = "crate::json_number::whole_or_null")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub monthly_limit: Option<i64>,
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
        (status = 422, description = "VALIDATION_FAILED: `monthly_limit` is not an integer >= 0", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn create_key(
    State(state): State<AppState>,
    session: SessionPrincipal,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<KeyCreated>), ApiError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge,
        _ => ApiError::BadRequestBody,
    })?;
    let request: NewKey = if body.iter().all(u8::is_ascii_whitespace) {
        NewKey::default()
    } else {
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
        Json::<Option<NewKey>>::from_bytes(&body)?
            .0
            .unwrap_or_default()
    };
    let monthly_limit = checked_limit(request.monthly_limit)?;
    let created = create_account_key(
        &state.db,
        session.account_id,
        state.config.account.max_keys,
        monthly_limit,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(created)))
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
    PathParams(key_id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
    revoke(&state.db, &state.keys, session.account_id, key_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
