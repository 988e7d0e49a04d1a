//! Who is calling: API-key, session and account principals.
//!
//! Each principal is a `FromRequestParts` extractor. API keys are looked up by their
//! SHA-256 in this replica's [`KeyCache`], else with one indexed query whose valid
//! answer is then cached; refusals are logged with their reason, never with the key.

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sqlx::PgPool;

use super::token::{self, API_KEY_PREFIX, SESSION_PREFIX, TokenHash};
use crate::app::AppState;
use crate::error::ApiError;
use crate::key_cache::{CachedKey, KeyCache};

/// A caller authenticated by an API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiKeyPrincipal {
    pub account_id: i64,
    pub key_id: i64,
}

/// A caller authenticated by a login session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPrincipal {
    pub account_id: i64,
}

/// A customer by session or by API key, for routes that take either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountPrincipal {
    pub account_id: i64,
}

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

/// The token of an `Authorization: Bearer` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

async fn authenticate_session(
    db: &PgPool,
    headers: &HeaderMap,
) -> Result<SessionPrincipal, ApiError> {
    let Some(candidate) = bearer(headers).filter(|t| token::plausible(t, SESSION_PREFIX)) else {
        return Err(ApiError::Unauthorized);
    };
    let account_id: Option<i64> = sqlx::query_scalar(
        "SELECT account_id FROM account_session WHERE token_hash = $1 AND expires_at > now()",
    )
    .bind(TokenHash::of(candidate).as_bytes())
    .fetch_optional(db)
    .await?;
    account_id
        .map(|account_id| SessionPrincipal { account_id })
        .ok_or(ApiError::Unauthorized)
}

impl FromRequestParts<AppState> for ApiKeyPrincipal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        authenticate_key(
            &state.db,
            &state.keys,
            &parts.headers,
            &state.config.upstream.key_header,
        )
        .await
    }
}

impl FromRequestParts<AppState> for SessionPrincipal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        authenticate_session(&state.db, &parts.headers).await
    }
}

impl FromRequestParts<AppState> for AccountPrincipal {
    type Rejection = ApiError;

    /// A bearer session wins when one is sent; otherwise the API key header is tried.
    /// Like every account route, a bad or missing credential is `UNAUTHORIZED`, here
    /// with a message naming both credentials the route takes.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key_header = state.config.upstream.key_header.as_str();
        let refused = || ApiError::SessionOrKeyRequired(key_header.to_owned());
        if bearer(&parts.headers).is_some() {
            return match authenticate_session(&state.db, &parts.headers).await {
                Ok(session) => Ok(AccountPrincipal {
                    account_id: session.account_id,
                }),
                Err(ApiError::Unauthorized) => Err(refused()),
                Err(other) => Err(other),
            };
        }
        if !parts.headers.contains_key(key_header) {
            return Err(refused());
        }
        match authenticate_key(&state.db, &state.keys, &parts.headers, key_header).await {
            Ok(key) => Ok(AccountPrincipal {
                account_id: key.account_id,
            }),
            Err(ApiError::InvalidApiKey) => Err(refused()),
            Err(other) => Err(other),
        }
    }
}
