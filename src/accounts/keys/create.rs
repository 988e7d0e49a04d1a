//! Making a key (at most `account.max_keys` live), and what every writer of `api_key`
//! shares: the insert and this replica's cache.

use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::rules::KeySettings;
use crate::audit::{self, Action, Entry, Origin, Target};
use crate::auth::key_cache::KeyCache;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::ApiError;
use crate::plan::RateLimit;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyCreated {
    #[schema(minimum = 1)]
    pub key_id: i64,
    /// Shown once; only its hash is kept.
    #[schema(pattern = "^tgk_[A-Za-z0-9]{40}$")]
    pub api_key: String,
}

pub(crate) async fn insert_key(
    conn: &mut sqlx::PgConnection,
    account_id: i64,
    key: &PlainToken,
) -> Result<i64, ApiError> {
    insert_key_with(conn, account_id, key, &KeySettings::default(), None).await
}

pub(super) async fn insert_key_with(
    conn: &mut sqlx::PgConnection,
    account_id: i64,
    key: &PlainToken,
    settings: &KeySettings,
    replaces: Option<i64>,
) -> Result<i64, ApiError> {
    let hash = key.hash();
    let (per_second, burst) = RateLimit::columns(settings.rate_limit);
    Ok(sqlx::query_scalar!(
        "INSERT INTO api_key (account_id, key_hash, prefix, monthly_limit, name, expires_at,
                              scopes, rate_per_second, rate_burst, replaces)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        account_id,
        hash.as_bytes(),
        key.display_prefix(),
        settings.monthly_limit,
        settings.name,
        settings.expires_at,
        settings.scopes.as_deref(),
        per_second,
        burst,
        replaces,
    )
    .fetch_one(conn)
    .await?)
}

/// Creates a key of `account_id`, refused past `max_keys` live ones (unrevoked and
/// unexpired): the count is taken under the account's row lock. Recorded in the audit
/// log as `origin`'s. Shared with the portal.
pub async fn create_account_key(
    db: &sqlx::PgPool,
    account_id: i64,
    max_keys: u32,
    settings: &KeySettings,
    origin: Origin,
) -> Result<KeyCreated, ApiError> {
    let key = PlainToken::generate(API_KEY_PREFIX);
    let mut tx = db.begin().await?;
    crate::db::lock_account(&mut tx, account_id).await?;
    let live = sqlx::query_scalar!(
        r#"SELECT count(*) AS "live!" FROM api_key
           WHERE account_id = $1 AND revoked_at IS NULL
             AND (expires_at IS NULL OR expires_at > now())"#,
        account_id,
    )
    .fetch_one(&mut *tx)
    .await?;
    if live >= i64::from(max_keys) {
        return Err(ApiError::KeyLimit(max_keys));
    }
    let key_id = insert_key_with(&mut tx, account_id, &key, settings, None).await?;
    let entry = created_entry(account_id, key_id, &key, settings);
    audit::record(&mut tx, origin, &entry).await?;
    tx.commit().await?;
    tracing::info!(account_id, key_id, "api key created");
    Ok(KeyCreated {
        key_id,
        api_key: key.reveal(),
    })
}

/// The audit entry of a key just made: its settings and its public prefix, never the key.
pub(crate) fn created_entry(
    account_id: i64,
    key_id: i64,
    key: &PlainToken,
    settings: &KeySettings,
) -> Entry {
    Entry {
        account_id,
        action: Action::KeyCreated,
        target: Target::Key(key_id),
        detail: json!({
            "name": settings.name,
            "prefix": key.display_prefix(),
            "expires_at": settings.expires_at,
            "scopes": settings.scopes,
            "monthly_limit": settings.monthly_limit,
            "rate_limit": settings.rate_limit,
        }),
    }
}

/// Drops a changed key from this replica's cache at once (the others hear the trigger).
pub(super) fn forget_here(keys: &KeyCache, hash: &[u8]) {
    match <[u8; 32]>::try_from(hash) {
        Ok(hash) => keys.invalidate(&hash),
        Err(_) => keys.flush(),
    }
}
