//! Changing and revoking a key (SPEC §13, §15, §16).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::create::forget_here;
use super::listing::{KeySummary, key_of};
use crate::audit::{self, Action, Entry, Origin, Target};
use crate::auth::key_cache::KeyCache;
use crate::error::ApiError;
use crate::plan::RateLimit;
use crate::usage::key_limits::KeyLimits;

/// Revokes `account_id`'s key `key_id`: refused from the next call on, on this replica at
/// once and on the others when the V5 trigger's notification arrives; recorded in the
/// audit log as `origin`'s in the same transaction. Revoking a revoked key changes
/// nothing (its revocation time stays, no cache hears of it, and nothing is recorded);
/// `KEY_NOT_FOUND` when the account has no such key.
pub async fn revoke(
    db: &sqlx::PgPool,
    keys: &KeyCache,
    account_id: i64,
    key_id: i64,
    origin: Origin,
) -> Result<(), ApiError> {
    let mut tx = db.begin().await?;
    // Only a live key's row changes; the V5 trigger then tells every replica its hash.
    let revoked = sqlx::query!(
        "UPDATE api_key SET revoked_at = now()
         WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL
         RETURNING key_hash, name, prefix",
        key_id,
        account_id,
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(revoked) = revoked {
        let entry = Entry {
            account_id,
            action: Action::KeyRevoked,
            target: Target::Key(key_id),
            detail: json!({"name": revoked.name, "prefix": revoked.prefix}),
        };
        audit::record(&mut tx, origin, &entry).await?;
        tx.commit().await?;
        // This replica forgets the key at once, without waiting for the notification.
        forget_here(keys, &revoked.key_hash);
        tracing::info!(account_id = account_id, key_id, "api key revoked");
        return Ok(());
    }
    let exists = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM api_key WHERE id = $1 AND account_id = $2) AS "exists!""#,
        key_id,
        account_id,
    )
    .fetch_one(&mut *tx)
    .await?;
    if exists {
        Ok(())
    } else {
        Err(ApiError::KeyNotFound)
    }
}

/// A change of a key (SPEC §13, §15, §16: `PATCH`): each part `None` = unchanged,
/// `Some(None)` = cleared; each present part already checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyChange {
    pub name: Option<String>,
    pub expires_at: Option<Option<DateTime<Utc>>>,
    pub scopes: Option<Option<Vec<String>>>,
    pub monthly_limit: Option<Option<i64>>,
    pub rate_limit: Option<Option<RateLimit>>,
}

impl KeyChange {
    pub fn is_empty(&self) -> bool {
        *self == KeyChange::default()
    }

    /// The parts asked for, as the audit log records them (a cleared part as null).
    fn detail(&self) -> Value {
        let mut detail = Map::new();
        if let Some(name) = &self.name {
            detail.insert("name".into(), json!(name));
        }
        if let Some(expires_at) = &self.expires_at {
            detail.insert("expires_at".into(), json!(expires_at));
        }
        if let Some(scopes) = &self.scopes {
            detail.insert("scopes".into(), json!(scopes));
        }
        if let Some(limit) = &self.monthly_limit {
            detail.insert("monthly_limit".into(), json!(limit));
        }
        if let Some(rate_limit) = &self.rate_limit {
            detail.insert("rate_limit".into(), json!(rate_limit));
        }
        Value::Object(detail)
    }
}

/// Changes `account_id`'s live key `key_id`, with its audit row (`origin`'s) in the same
/// transaction; the key as it now is, `KEY_NOT_FOUND` when the account has no such
/// unrevoked key (a revoked key's settings no longer matter, and are left as they
/// were). This replica follows at once; the others hear the V14 and V18 triggers.
/// Shared by the account API and the portal.
pub async fn change_key(
    db: &sqlx::PgPool,
    keys: &KeyCache,
    key_limits: &KeyLimits,
    account_id: i64,
    key_id: i64,
    change: &KeyChange,
    origin: Origin,
) -> Result<KeySummary, ApiError> {
    let mut tx = db.begin().await?;
    let (per_second, burst) = RateLimit::columns(change.rate_limit.flatten());
    let scopes = change.scopes.clone().flatten();
    let changed = sqlx::query_scalar!(
        "UPDATE api_key SET
             name = coalesce($3, name),
             expires_at = CASE WHEN $4 THEN $5 ELSE expires_at END,
             scopes = CASE WHEN $6 THEN $7 ELSE scopes END,
             monthly_limit = CASE WHEN $8 THEN $9 ELSE monthly_limit END,
             rate_per_second = CASE WHEN $10 THEN $11 ELSE rate_per_second END,
             rate_burst = CASE WHEN $10 THEN $12 ELSE rate_burst END
         WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL
           AND (expires_at IS NULL OR expires_at > now())
         RETURNING key_hash",
        key_id,
        account_id,
        change.name,
        change.expires_at.is_some(),
        change.expires_at.flatten(),
        change.scopes.is_some(),
        scopes.as_deref(),
        change.monthly_limit.is_some(),
        change.monthly_limit.flatten(),
        change.rate_limit.is_some(),
        per_second,
        burst,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(changed) = changed else {
        // An expired key is not changed back to life (that would pass `max_keys`); a
        // revoked or unknown one is not found.
        let expired = sqlx::query_scalar!(
            r#"SELECT EXISTS (SELECT 1 FROM api_key WHERE id = $1 AND account_id = $2
                   AND revoked_at IS NULL AND expires_at <= now()) AS "expired!""#,
            key_id,
            account_id,
        )
        .fetch_one(&mut *tx)
        .await?;
        return Err(if expired {
            ApiError::KeyInactive
        } else {
            ApiError::KeyNotFound
        });
    };
    let entry = Entry {
        account_id,
        action: Action::KeyChanged,
        target: Target::Key(key_id),
        detail: change.detail(),
    };
    audit::record(&mut tx, origin, &entry).await?;
    tx.commit().await?;
    forget_here(keys, &changed);
    if change.monthly_limit.is_some() {
        key_limits.forget(key_id);
    }
    tracing::info!(account_id, key_id, "api key changed");
    key_of(db, account_id, key_id)
        .await?
        .ok_or(ApiError::KeyNotFound)
}

/// Sets (or with `None` clears) the monthly limit of `account_id`'s key `key_id`: a
/// [`change_key`] of that part alone.
pub async fn set_key_limit(
    db: &sqlx::PgPool,
    keys: &KeyCache,
    key_limits: &KeyLimits,
    account_id: i64,
    key_id: i64,
    monthly_limit: Option<i64>,
    origin: Origin,
) -> Result<KeySummary, ApiError> {
    let change = KeyChange {
        monthly_limit: Some(monthly_limit),
        ..KeyChange::default()
    };
    change_key(db, keys, key_limits, account_id, key_id, &change, origin).await
}
