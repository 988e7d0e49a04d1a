//! API-key management: create (at most `account.max_keys` unrevoked, optionally with a
//! monthly limit), list (paged, with each key's use this month), revoke. Changing a
//! key's limit is in [`super::key_limit`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::{CONTENT_TYPE, LINK};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::SessionPrincipal;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::{ApiError, ErrorBody, PathParams, QueryParams};
use crate::month::Month;
use crate::state::AppState;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyCreated {
    #[schema(minimum = 1)]
    pub key_id: i64,
    /// Shown once; only its hash is kept.
    #[schema(pattern = "^tgk_[A-Za-z0-9]{40}$")]
    pub api_key: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema, sqlx::FromRow)]
pub struct KeySummary {
    #[schema(minimum = 1)]
    pub key_id: i64,
    /// The key's first characters, to tell keys apart.
    #[schema(pattern = "^tgk_[A-Za-z0-9]{8}$")]
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Units per UTC month this key may use (SPEC §13); null = no limit of its own.
    #[schema(minimum = 0)]
    pub monthly_limit: Option<i64>,
    /// Units accounted through this key in the current UTC month.
    #[schema(minimum = 0)]
    pub used: i64,
}

/// The account's keys with ids above `after`, revoked ones included, oldest first, at
/// most `limit`: prefixes only, never a key. Shared by the key list and the console.
pub async fn keys_of(
    db: &sqlx::PgPool,
    account_id: i64,
    after: i64,
    limit: i64,
) -> Result<Vec<KeySummary>, sqlx::Error> {
    keys_in_month(db, account_id, after, limit, Month::containing(Utc::now())).await
}

/// [`keys_of`], with `used` counted in `month`.
pub async fn keys_in_month(
    db: &sqlx::PgPool,
    account_id: i64,
    after: i64,
    limit: i64,
    month: Month,
) -> Result<Vec<KeySummary>, sqlx::Error> {
    sqlx::query_as(
        "SELECT k.id AS key_id, k.prefix, k.created_at, k.revoked_at, k.monthly_limit,
                coalesce(c.used, 0) AS used
         FROM api_key k
         LEFT JOIN key_usage_counter c ON c.key_id = k.id AND c.month_start = $4
         WHERE k.account_id = $1 AND k.id > $2 ORDER BY k.id LIMIT $3",
    )
    .bind(account_id)
    .bind(after)
    .bind(limit)
    .bind(month.start())
    .fetch_all(db)
    .await
}

/// Largest limit a key takes (far beyond any month's use; keeps sums in `bigint`).
pub const MAX_KEY_LIMIT: i64 = 1_000_000_000_000;

/// The optional body of `POST /account/v1/keys`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// Units per UTC month this key may use; absent or null = no limit of its own.
    #[serde(default, deserialize_with = "crate::json_number::whole_or_null")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub monthly_limit: Option<i64>,
}

/// A limit as given, checked: `0..=MAX_KEY_LIMIT`, or none.
pub fn checked_limit(limit: Option<i64>) -> Result<Option<i64>, ApiError> {
    match limit {
        Some(n) if !(0..=MAX_KEY_LIMIT).contains(&n) => Err(ApiError::Validation(format!(
            "monthly_limit must be an integer from 0 to {MAX_KEY_LIMIT}, or null"
        ))),
        other => Ok(other),
    }
}

pub(super) async fn insert_key(
    conn: &mut sqlx::PgConnection,
    account_id: i64,
    key: &PlainToken,
) -> Result<i64, ApiError> {
    insert_limited_key(conn, account_id, key, None).await
}

async fn insert_limited_key(
    conn: &mut sqlx::PgConnection,
    account_id: i64,
    key: &PlainToken,
    monthly_limit: Option<i64>,
) -> Result<i64, ApiError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO api_key (account_id, key_hash, prefix, monthly_limit)
         VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(account_id)
    .bind(key.hash().as_bytes())
    .bind(key.display_prefix())
    .bind(monthly_limit)
    .fetch_one(conn)
    .await?)
}

/// Creates a key of `account_id`, refused past `max_keys` unrevoked ones: the count is
/// taken under the account's row lock. Shared with the portal.
pub async fn create_account_key(
    db: &sqlx::PgPool,
    account_id: i64,
    max_keys: u32,
    monthly_limit: Option<i64>,
) -> Result<KeyCreated, ApiError> {
    let key = PlainToken::generate(API_KEY_PREFIX);
    let mut tx = db.begin().await?;
    crate::db::lock_account(&mut tx, account_id).await?;
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_key WHERE account_id = $1 AND revoked_at IS NULL",
    )
    .bind(account_id)
    .fetch_one(&mut *tx)
    .await?;
    if live >= i64::from(max_keys) {
        return Err(ApiError::KeyLimit(max_keys));
    }
    let key_id = insert_limited_key(&mut tx, account_id, &key, monthly_limit).await?;
    tx.commit().await?;
    tracing::info!(account_id, key_id, "api key created");
    Ok(KeyCreated {
        key_id,
        api_key: key.reveal(),
    })
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
    // Only a live key's row changes; the V5 trigger then tells every replica its hash.
    let revoked: Option<Vec<u8>> = sqlx::query_scalar(
        "UPDATE api_key SET revoked_at = now()
         WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL RETURNING key_hash",
    )
    .bind(key_id)
    .bind(session.account_id)
    .fetch_optional(&state.db)
    .await?;
    if let Some(hash) = revoked {
        // This replica forgets the key at once, without waiting for the notification.
        match <[u8; 32]>::try_from(hash.as_slice()) {
            Ok(hash) => state.keys.invalidate(&hash),
            Err(_) => state.keys.flush(),
        }
        tracing::info!(account_id = session.account_id, key_id, "api key revoked");
        return Ok(StatusCode::NO_CONTENT);
    }
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM api_key WHERE id = $1 AND account_id = $2)",
    )
    .bind(key_id)
    .bind(session.account_id)
    .fetch_one(&state.db)
    .await?;
    if exists {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::KeyNotFound)
    }
}
