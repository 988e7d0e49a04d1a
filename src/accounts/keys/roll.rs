//! Rolling a key (SPEC §15): a replacement with the same settings, the old key kept
//! for a grace period.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::create::{forget_here, insert_key_with};
use super::rules::{KeySettings, MAX_GRACE_SECONDS};
use crate::audit::{self, Action, Entry, Origin, Target};
use crate::auth::key_cache::KeyCache;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::ApiError;
use crate::plan::RateLimit;

/// What a roll asks for: the key, and the seconds the old one keeps working.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRoll {
    pub key_id: i64,
    pub grace_seconds: i64,
}

/// A rolled key: the new one (shown once) and when the old one stops.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyRolled {
    #[schema(minimum = 1)]
    pub key_id: i64,
    /// Shown once; only its hash is kept.
    #[schema(pattern = "^tgk_[A-Za-z0-9]{40}$")]
    pub api_key: String,
    /// The `key_id` of the key it replaces.
    pub replaces: i64,
    /// When the replaced key stops being accepted.
    pub old_key_expires_at: DateTime<Utc>,
}

/// Rolls `account_id`'s key `key_id` (SPEC §15): a new key with its name, scopes and
/// limits, and the old one expiring `grace_seconds` from `now` (or at its own earlier
/// expiry), in one transaction with its audit row (`origin`'s, about the old key). A
/// revoked or expired key is `KEY_INACTIVE`; another account's, `KEY_NOT_FOUND`. The
/// new key replaces one: `account.max_keys` refuses it only when the account's other
/// live keys number that many already.
pub async fn roll(
    db: &sqlx::PgPool,
    keys: &KeyCache,
    account_id: i64,
    roll: KeyRoll,
    max_keys: u32,
    origin: Origin,
    now: DateTime<Utc>,
) -> Result<KeyRolled, ApiError> {
    let KeyRoll {
        key_id,
        grace_seconds,
    } = roll;
    if !(0..=MAX_GRACE_SECONDS).contains(&grace_seconds) {
        return Err(ApiError::Validation(format!(
            "grace_seconds must be an integer from 0 to {MAX_GRACE_SECONDS}"
        )));
    }
    let mut tx = db.begin().await?;
    crate::db::lock_account(&mut tx, account_id).await?;
    let old = sqlx::query!(
        "SELECT key_hash, revoked_at, expires_at, name, scopes, monthly_limit,
                rate_per_second, rate_burst
         FROM api_key WHERE id = $1 AND account_id = $2 FOR UPDATE",
        key_id,
        account_id,
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(ApiError::KeyNotFound)?;
    if old.revoked_at.is_some() || old.expires_at.is_some_and(|t| t <= now) {
        return Err(ApiError::KeyInactive);
    }
    // The old key is on its way out: the others may number `max_keys` less one, so keys
    // in their grace never stack past the limit by more than the one being replaced.
    let others = sqlx::query_scalar!(
        r#"SELECT count(*) AS "live!" FROM api_key
           WHERE account_id = $1 AND id <> $2 AND revoked_at IS NULL
             AND (expires_at IS NULL OR expires_at > now())"#,
        account_id,
        key_id,
    )
    .fetch_one(&mut *tx)
    .await?;
    if others >= i64::from(max_keys) {
        return Err(ApiError::KeyLimit(max_keys));
    }
    let grace_end = now + chrono::Duration::seconds(grace_seconds);
    let old_key_expires_at = old.expires_at.map_or(grace_end, |t| t.min(grace_end));
    // As stored (to the microsecond), so the answer matches the key list.
    let old_key_expires_at = sqlx::query_scalar!(
        r#"UPDATE api_key SET expires_at = $2 WHERE id = $1 RETURNING expires_at AS "expires_at!""#,
        key_id,
        old_key_expires_at,
    )
    .fetch_one(&mut *tx)
    .await?;
    let settings = KeySettings {
        name: old.name,
        expires_at: old.expires_at,
        scopes: old.scopes,
        monthly_limit: old.monthly_limit,
        rate_limit: RateLimit::from_columns(old.rate_per_second, old.rate_burst),
    };
    let key = PlainToken::generate(API_KEY_PREFIX);
    let new_id = insert_key_with(&mut tx, account_id, &key, &settings, Some(key_id)).await?;
    let entry = Entry {
        account_id,
        action: Action::KeyRolled,
        target: Target::Key(key_id),
        detail: json!({
            "key_id": new_id,
            "prefix": key.display_prefix(),
            "old_key_expires_at": old_key_expires_at,
        }),
    };
    audit::record(&mut tx, origin, &entry).await?;
    tx.commit().await?;
    forget_here(keys, &old.key_hash);
    tracing::info!(
        account_id,
        key_id = new_id,
        replaces = key_id,
        "api key rolled"
    );
    Ok(KeyRolled {
        key_id: new_id,
        api_key: key.reveal(),
        replaces: key_id,
        old_key_expires_at,
    })
}
