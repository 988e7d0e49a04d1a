//! API-key authentication (SPEC §3.1.1).
//!
//! Keys are looked up by their SHA-256 in this replica's [`KeyCache`], else with one
//! indexed query whose valid answer is then cached; refusals are logged with their
//! reason, never with the key.

use axum::http::HeaderMap;
use sqlx::PgPool;

use super::key_cache::{CachedKey, KeyCache};
use super::principal::ApiKeyPrincipal;
use super::token::{self, API_KEY_PREFIX, TokenHash};
use crate::error::ApiError;

/// Checks the key in `key_header`: missing, malformed, unknown or revoked is
/// `INVALID_API_KEY`; an unreachable database is `SERVICE_UNAVAILABLE`.
pub async fn authenticate_key(
    db: &PgPool,
    keys: &KeyCache,
    headers: &HeaderMap,
    key_header: &str,
) -> Result<ApiKeyPrincipal, ApiError> {
    let Some(value) = headers.get(key_header) else {
        tracing::debug!("api key refused: missing");
        return Err(ApiError::InvalidApiKey);
    };
    let Ok(candidate) = value.to_str() else {
        tracing::debug!("api key refused: not visible ASCII");
        return Err(ApiError::InvalidApiKey);
    };
    let candidate = candidate.trim();
    if !token::plausible(candidate, API_KEY_PREFIX) {
        tracing::debug!(len = candidate.len(), "api key refused: malformed");
        return Err(ApiError::InvalidApiKey);
    }
    let hash = TokenHash::of(candidate);
    if let Some(hit) = keys.get(&hash.0) {
        return Ok(ApiKeyPrincipal {
            account_id: hit.account_id,
            key_id: hit.key_id,
        });
    }
    let ticket = keys.ticket();
    let row: Option<(i64, i64, bool)> = sqlx::query_as(
        "SELECT id, account_id, revoked_at IS NOT NULL FROM api_key WHERE key_hash = $1",
    )
    .bind(hash.as_bytes())
    .fetch_optional(db)
    .await?;
    match row {
        Some((key_id, account_id, false)) => {
            keys.insert(ticket, hash.0, CachedKey { key_id, account_id });
            Ok(ApiKeyPrincipal { account_id, key_id })
        }
        Some((key_id, account_id, true)) => {
            tracing::info!(key_id, account_id, "api key refused: revoked");
            Err(ApiError::InvalidApiKey)
        }
        None => {
            tracing::info!("api key refused: unknown");
            Err(ApiError::InvalidApiKey)
        }
    }
}
