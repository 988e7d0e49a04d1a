//! API-key management: create, list, revoke.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::SessionPrincipal;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::{ApiError, ErrorBody, PathParams};
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
}

pub(super) async fn insert_key(
    conn: &mut sqlx::PgConnection,
    account_id: i64,
    key: &PlainToken,
) -> Result<i64, ApiError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO api_key (account_id, key_hash, prefix) VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(account_id)
    .bind(key.hash().as_bytes())
    .bind(key.display_prefix())
    .fetch_one(conn)
    .await?)
}

/// Creates another API key; the response is the only time it is shown.
#[utoipa::path(post, path = "/account/v1/keys", tag = "account",
    security(("session" = [])),
    responses(
        (status = 201, description = "The new key; `api_key` is shown this once", body = KeyCreated),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 409, description = "KEY_LIMIT: the account holds `account.max_keys` unrevoked keys", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn create_key(
    State(state): State<AppState>,
    session: SessionPrincipal,
) -> Result<(StatusCode, Json<KeyCreated>), ApiError> {
    let key = PlainToken::generate(API_KEY_PREFIX);
    let mut conn = state.db.acquire().await?;
    let key_id = insert_key(&mut conn, session.account_id, &key).await?;
    tracing::info!(account_id = session.account_id, key_id, "api key created");
    Ok((
        StatusCode::CREATED,
        Json(KeyCreated {
            key_id,
            api_key: key.reveal(),
        }),
    ))
}

/// Lists the account's keys, revoked ones included, oldest first.
#[utoipa::path(get, path = "/account/v1/keys", tag = "account",
    security(("session" = [])),
    responses(
        (status = 200, description = "Every key of the account, revoked ones included", body = [KeySummary]),
        (status = 401, description = "UNAUTHORIZED: missing, unknown or expired session token", body = ErrorBody),
        (status = 500, description = "INTERNAL_ERROR", body = ErrorBody),
        (status = 503, description = "SERVICE_UNAVAILABLE: the database does not answer", body = ErrorBody),
    ))]
pub async fn list_keys(
    State(state): State<AppState>,
    session: SessionPrincipal,
) -> Result<Json<Vec<KeySummary>>, ApiError> {
    let keys = sqlx::query_as(
        "SELECT id AS key_id, prefix, created_at, revoked_at
         FROM api_key WHERE account_id = $1 ORDER BY id",
    )
    .bind(session.account_id)
    .fetch_all(&state.db)
    .await?;
    Ok(Json(keys))
}

/// Revokes a key; it is refused from the next call on. Revoking twice is harmless.
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
    let found: Option<i64> = sqlx::query_scalar(
        "UPDATE api_key SET revoked_at = coalesce(revoked_at, now())
         WHERE id = $1 AND account_id = $2 RETURNING id",
    )
    .bind(key_id)
    .bind(session.account_id)
    .fetch_optional(&state.db)
    .await?;
    match found {
        Some(_) => {
            // Other replicas hear the revocation through NOTIFY; this one forgets at once.
            state.keys.flush();
            tracing::info!(account_id = session.account_id, key_id, "api key revoked");
            Ok(StatusCode::NO_CONTENT)
        }
        None => Err(ApiError::KeyNotFound),
    }
}
