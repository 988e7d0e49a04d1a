//! API keys (the `api_key` table, SPEC §3.2, §13): created (at most `account.max_keys`
//! unrevoked, optionally with a monthly limit), listed with each key's use this month,
//! limited, revoked. The account API and the portal both call these; no face writes
//! `api_key` itself.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::key_cache::KeyCache;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::ApiError;
use crate::month::Month;
use crate::usage::key_limits::KeyLimits;

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
    sqlx::query_as!(
        KeySummary,
        r#"SELECT k.id AS key_id, k.prefix, k.created_at, k.revoked_at, k.monthly_limit,
                  coalesce(c.used, 0) AS "used!"
           FROM api_key k
           LEFT JOIN key_usage_counter c ON c.key_id = k.id AND c.month_start = $4
           WHERE k.account_id = $1 AND k.id > $2 ORDER BY k.id LIMIT $3"#,
        account_id,
        after,
        limit,
        month.start(),
    )
    .fetch_all(db)
    .await
}

/// Largest limit a key takes (far beyond any month's use; keeps sums in `bigint`).
pub const MAX_KEY_LIMIT: i64 = 1_000_000_000_000;

/// A limit as given, checked: `0..=MAX_KEY_LIMIT`, or none.
pub fn checked_limit(limit: Option<i64>) -> Result<Option<i64>, ApiError> {
    match limit {
        Some(n) if !(0..=MAX_KEY_LIMIT).contains(&n) => Err(ApiError::Validation(format!(
            "monthly_limit must be an integer from 0 to {MAX_KEY_LIMIT}, or null"
        ))),
        other => Ok(other),
    }
}

pub(crate) async fn insert_key(
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
    let hash = key.hash();
    Ok(sqlx::query_scalar!(
        "INSERT INTO api_key (account_id, key_hash, prefix, monthly_limit)
         VALUES ($1, $2, $3, $4) RETURNING id",
        account_id,
        hash.as_bytes(),
        key.display_prefix(),
        monthly_limit,
    )
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
    let live = sqlx::query_scalar!(
        r#"SELECT count(*) AS "live!" FROM api_key WHERE account_id = $1 AND revoked_at IS NULL"#,
        account_id,
    )
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

/// Revokes `account_id`'s key `key_id`: refused from the next call on, on this replica at
/// once and on the others when the V5 trigger's notification arrives. Revoking a revoked
/// key changes nothing (its revocation time stays, and no cache hears of it);
/// `KEY_NOT_FOUND` when the account has no such key.
pub async fn revoke(
    db: &sqlx::PgPool,
    keys: &KeyCache,
    account_id: i64,
    key_id: i64,
) -> Result<(), ApiError> {
    // Only a live key's row changes; the V5 trigger then tells every replica its hash.
    let revoked = sqlx::query_scalar!(
        "UPDATE api_key SET revoked_at = now()
         WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL RETURNING key_hash",
        key_id,
        account_id,
    )
    .fetch_optional(db)
    .await?;
    if let Some(hash) = revoked {
        // This replica forgets the key at once, without waiting for the notification.
        match <[u8; 32]>::try_from(hash.as_slice()) {
            Ok(hash) => keys.invalidate(&hash),
            Err(_) => keys.flush(),
        }
        tracing::info!(account_id = account_id, key_id, "api key revoked");
        return Ok(());
    }
    let exists = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM api_key WHERE id = $1 AND account_id = $2) AS "exists!""#,
        key_id,
        account_id,
    )
    .fetch_one(db)
    .await?;
    if exists {
        Ok(())
    } else {
        Err(ApiError::KeyNotFound)
    }
}

/// Sets (or with `None` clears) the limit of `account_id`'s key `key_id`; the key as it
/// now is, `KEY_NOT_FOUND` when the account has no such live key (a revoked key's limit
/// no longer matters, and is left as it was). Shared by the account API and the portal.
pub async fn set_key_limit(
    db: &sqlx::PgPool,
    key_limits: &KeyLimits,
    account_id: i64,
    key_id: i64,
    monthly_limit: Option<i64>,
) -> Result<KeySummary, ApiError> {
    let month = Month::containing(chrono::Utc::now());
    let key = sqlx::query_as!(
        KeySummary,
        r#"WITH changed AS (
               UPDATE api_key SET monthly_limit = $3
               WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL
               RETURNING id, prefix, created_at, revoked_at, monthly_limit)
           SELECT k.id AS "key_id!", k.prefix AS "prefix!", k.created_at AS "created_at!",
                  k.revoked_at, k.monthly_limit, coalesce(c.used, 0) AS "used!"
           FROM changed k
           LEFT JOIN key_usage_counter c ON c.key_id = k.id AND c.month_start = $4"#,
        key_id,
        account_id,
        monthly_limit,
        month.start(),
    )
    .fetch_optional(db)
    .await?;
    let key = key.ok_or(ApiError::KeyNotFound)?;
    // This replica follows at once; the others hear the trigger's notification.
    key_limits.forget(key_id);
    tracing::info!(account_id, key_id, monthly_limit, "api key limit changed");
    Ok(key)
}
