//! Login sessions: bearer tokens (`tgs_…`) stored as SHA-256 with an expiry.

use axum::http::HeaderMap;
use chrono::{DateTime, Duration, SubsecRound, Utc};
use sqlx::PgPool;

use super::principal::SessionPrincipal;
use super::token::{self, PlainToken, SESSION_PREFIX, TokenHash, bearer};
use crate::error::ApiError;

pub(super) async fn authenticate_session(
    db: &PgPool,
    headers: &HeaderMap,
) -> Result<SessionPrincipal, ApiError> {
    let Some(candidate) = bearer(headers) else {
        return Err(ApiError::Unauthorized);
    };
    account_of(db, candidate)
        .await?
        .map(|account_id| SessionPrincipal { account_id })
        .ok_or(ApiError::Unauthorized)
}

/// The account whose live session token is `candidate` (the bearer token, or the
/// customer portal's cookie).
pub async fn account_of(db: &PgPool, candidate: &str) -> Result<Option<i64>, sqlx::Error> {
    if !token::plausible(candidate, SESSION_PREFIX) {
        return Ok(None);
    }
    sqlx::query_scalar(
        "SELECT account_id FROM account_session WHERE token_hash = $1 AND expires_at > now()",
    )
    .bind(TokenHash::of(candidate).as_bytes())
    .fetch_optional(db)
    .await
}

/// Ends the session whose token is `token` (signing out of the portal).
pub async fn close(db: &PgPool, token: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM account_session WHERE token_hash = $1")
        .bind(TokenHash::of(token).as_bytes())
        .execute(db)
        .await?;
    Ok(())
}

/// Deletes sessions more than a day past their expiry; returns how many.
pub async fn purge_expired(db: &sqlx::PgPool) -> Result<u64, sqlx::Error> {
    let done =
        sqlx::query("DELETE FROM account_session WHERE expires_at < now() - interval '1 day'")
            .execute(db)
            .await?;
    Ok(done.rows_affected())
}

/// Opens a session for `account_id` lasting `ttl_seconds` (capped at a century) from
/// `now`; returns the token, to be shown once, and its expiry (whole seconds).
pub async fn create(
    db: &PgPool,
    account_id: i64,
    ttl_seconds: i64,
    now: DateTime<Utc>,
) -> Result<(PlainToken, DateTime<Utc>), sqlx::Error> {
    let token = PlainToken::generate(SESSION_PREFIX);
    let expires_at = now
        .checked_add_signed(Duration::seconds(ttl_seconds.min(100 * 365 * 86_400)))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
        .trunc_subsecs(0);
    sqlx::query(
        "INSERT INTO account_session (account_id, token_hash, expires_at) VALUES ($1, $2, $3)",
    )
    .bind(account_id)
    .bind(token.hash().as_bytes())
    .bind(expires_at)
    .execute(db)
    .await?;
    Ok((token, expires_at))
}
