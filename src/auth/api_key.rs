//! API-key authentication (SPEC §3.1.1).
//!
//! Keys are looked up by their SHA-256 in this replica's [`KeyCache`], else with one
//! indexed query whose valid answer is then cached; a hash the database does not know
//! is remembered as unknown for a few seconds (see [`KeyCache::is_known_unknown`]), so
//! a flood of one unknown key does not query PostgreSQL each time. Refusals are counted
//! and logged sparingly with their reason ([`super::refusal`]), never with the key.

use std::sync::Arc;
use std::time::Instant;

use axum::http::HeaderMap;
use chrono::Utc;
use sqlx::PgPool;

use super::key_cache::{CachedKey, KeyCache};
use super::key_policy::KeyPolicy;
use super::principal::ApiKeyPrincipal;
use super::refusal::{Refusal, refused};
use super::token::{self, API_KEY_PREFIX, TokenHash};
use crate::error::ApiError;
use crate::plan::RateLimit;

/// Checks the key in `key_header`: missing, malformed, unknown or revoked is
/// `INVALID_API_KEY`, past its expiry `KEY_EXPIRED`; an unreachable database is
/// `SERVICE_UNAVAILABLE`.
pub async fn authenticate_key(
    db: &PgPool,
    keys: &KeyCache,
    headers: &HeaderMap,
    key_header: &str,
) -> Result<ApiKeyPrincipal, ApiError> {
    let Some(value) = headers.get(key_header) else {
        if let Some(suppressed) = refused(Refusal::MissingKey) {
            tracing::debug!(suppressed, "api key refused: missing");
        }
        // A key sent as a bearer token is the commonest mistake: say where it goes.
        if token::bearer(headers).is_some_and(|t| t.starts_with(API_KEY_PREFIX)) {
            return Err(ApiError::KeyInAuthorization(key_header.to_owned()));
        }
        return Err(ApiError::InvalidApiKey);
    };
    let candidate = value.to_str().map(str::trim).unwrap_or_default();
    if !token::plausible(candidate, API_KEY_PREFIX) {
        if let Some(suppressed) = refused(Refusal::MalformedKey) {
            tracing::debug!(len = value.len(), suppressed, "api key refused: malformed");
        }
        return Err(ApiError::InvalidApiKey);
    }
    let hash = TokenHash::of(candidate);
    if let Some(hit) = keys.get(&hash.0) {
        if hit.policy.as_ref().is_some_and(|p| p.expired(Utc::now())) {
            return Err(expired(hit.key_id, hit.account_id));
        }
        return Ok(ApiKeyPrincipal {
            account_id: hit.account_id,
            key_id: hit.key_id,
            policy: hit.policy,
            used: hit.used,
            limit_read: None,
        });
    }
    if keys.is_known_unknown(&hash.0, Instant::now()) {
        return Err(unknown());
    }
    let ticket = keys.ticket();
    let row = sqlx::query!(
        r#"SELECT id, account_id, revoked_at IS NOT NULL AS "revoked!", monthly_limit,
                  expires_at, scopes, rate_per_second, rate_burst
           FROM api_key WHERE key_hash = $1"#,
        hash.as_bytes(),
    )
    .fetch_optional(db)
    .await?;
    let Some(row) = row else {
        keys.remember_unknown(hash.0, Instant::now());
        return Err(unknown());
    };
    let (key_id, account_id) = (row.id, row.account_id);
    if row.revoked {
        if let Some(suppressed) = refused(Refusal::RevokedKey) {
            tracing::info!(key_id, account_id, suppressed, "api key refused: revoked");
        }
        return Err(ApiError::InvalidApiKey);
    }
    let policy = KeyPolicy::of(
        row.expires_at,
        row.scopes,
        RateLimit::from_columns(row.rate_per_second, row.rate_burst),
    )
    .map(Arc::new);
    // An expired key is cached too: it stays expired, and its refusal costs no query.
    keys.insert(
        ticket,
        hash.0,
        CachedKey {
            key_id,
            account_id,
            policy: policy.clone(),
            used: keys.use_of(key_id),
        },
    );
    if policy.as_ref().is_some_and(|p| p.expired(Utc::now())) {
        return Err(expired(key_id, account_id));
    }
    Ok(ApiKeyPrincipal {
        account_id,
        key_id,
        policy,
        used: keys.use_of(key_id),
        limit_read: Some(row.monthly_limit),
    })
}

fn expired(key_id: i64, account_id: i64) -> ApiError {
    if let Some(suppressed) = refused(Refusal::ExpiredKey) {
        tracing::info!(key_id, account_id, suppressed, "api key refused: expired");
    }
    ApiError::KeyExpired
}

fn unknown() -> ApiError {
    if let Some(suppressed) = refused(Refusal::UnknownKey) {
        tracing::warn!(suppressed, "api key refused: unknown");
    }
    ApiError::InvalidApiKey
}
