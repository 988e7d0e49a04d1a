//! API keys (the `api_key` table, SPEC §3.2, §13, §15, §16): created (at most
//! `account.max_keys` live, with a name, an expiry, scopes, a monthly limit and a rate
//! limit), listed with each key's use this month, changed, rolled, revoked. The account API and the portal both call these; no face writes
//! `api_key` itself.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::key_cache::KeyCache;
use crate::auth::key_policy::ALL_SCOPES;
use crate::auth::token::{API_KEY_PREFIX, PlainToken};
use crate::error::ApiError;
use crate::month::Month;
use crate::plan::RateLimit;
use crate::usage::key_limits::KeyLimits;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyCreated {
    #[schema(minimum = 1)]
    pub key_id: i64,
    /// Shown once; only its hash is kept.
    #[schema(pattern = "^tgk_[A-Za-z0-9]{40}$")]
    pub api_key: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeySummary {
    #[schema(minimum = 1)]
    pub key_id: i64,
    /// The key's first characters, to tell keys apart.
    #[schema(pattern = "^tgk_[A-Za-z0-9]{8}$")]
    pub prefix: String,
    /// What the customer calls it (SPEC §15).
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// When the key stops being accepted (`KEY_EXPIRED`); null = never.
    pub expires_at: Option<DateTime<Utc>>,
    /// The proxied paths the key may call.
    pub scopes: Vec<String>,
    /// The last proxied call through it (at most 60 s stale); null = never.
    pub last_used_at: Option<DateTime<Utc>>,
    /// Units per UTC month this key may use (SPEC §13); null = no limit of its own.
    #[schema(minimum = 0)]
    pub monthly_limit: Option<i64>,
    /// Calls per second through this key (SPEC §16); null = only the account's.
    pub rate_limit: Option<RateLimit>,
    /// Units accounted through this key in the current UTC month.
    #[schema(minimum = 0)]
    pub used: i64,
}

/// A key's row as the listing reads it.
struct KeyRow {
    key_id: i64,
    prefix: String,
    name: String,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
    scopes: Option<Vec<String>>,
    last_used_at: Option<DateTime<Utc>>,
    monthly_limit: Option<i64>,
    rate_per_second: Option<i32>,
    rate_burst: Option<i32>,
    used: i64,
}

impl From<KeyRow> for KeySummary {
    fn from(row: KeyRow) -> Self {
        KeySummary {
            key_id: row.key_id,
            prefix: row.prefix,
            name: row.name,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
            expires_at: row.expires_at,
            scopes: row
                .scopes
                .unwrap_or_else(|| ALL_SCOPES.iter().map(|s| (*s).to_owned()).collect()),
            last_used_at: row.last_used_at,
            monthly_limit: row.monthly_limit,
            rate_limit: RateLimit::from_columns(row.rate_per_second, row.rate_burst),
            used: row.used,
        }
    }
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
    let rows = sqlx::query_as!(
        KeyRow,
        r#"SELECT k.id AS key_id, k.prefix, k.name, k.created_at, k.revoked_at, k.expires_at,
                  k.scopes, k.last_used_at, k.monthly_limit, k.rate_per_second, k.rate_burst,
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
    .await?;
    Ok(rows.into_iter().map(KeySummary::from).collect())
}

/// One key of the account, as listed.
pub async fn key_of(
    db: &sqlx::PgPool,
    account_id: i64,
    key_id: i64,
) -> Result<Option<KeySummary>, sqlx::Error> {
    let month = Month::containing(Utc::now());
    let first = keys_in_month(db, account_id, key_id.saturating_sub(1), 1, month).await?;
    Ok(first.into_iter().find(|k| k.key_id == key_id))
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
    insert_key_with(conn, account_id, key, &KeySettings::default(), None).await
}

async fn insert_key_with(
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

/// What a key is made with (SPEC §13, §15, §16), each part checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySettings {
    pub name: String,
    pub expires_at: Option<DateTime<Utc>>,
    /// `None`: every proxied path.
    pub scopes: Option<Vec<String>>,
    pub monthly_limit: Option<i64>,
    pub rate_limit: Option<RateLimit>,
}

impl Default for KeySettings {
    fn default() -> Self {
        Self {
            name: DEFAULT_KEY_NAME.to_owned(),
            expires_at: None,
            scopes: None,
            monthly_limit: None,
            rate_limit: None,
        }
    }
}

/// The name of signup's key, and of keys made without one.
pub const DEFAULT_KEY_NAME: &str = "default";
/// Longest key name, in characters.
pub const MAX_KEY_NAME_CHARS: usize = 64;
/// Most scopes one key lists.
pub const MAX_SCOPES: usize = 20;
/// Longest scope, in bytes.
pub const MAX_SCOPE_BYTES: usize = 256;
/// Longest grace a rolled key's predecessor gets (a week), and the default (a day).
pub const MAX_GRACE_SECONDS: i64 = 604_800;
pub const DEFAULT_GRACE_SECONDS: i64 = 86_400;

/// A key name as given, checked: 1 to 64 printable characters, not all blank.
pub fn checked_name(name: String) -> Result<String, ApiError> {
    let count = name.chars().count();
    if count == 0
        || count > MAX_KEY_NAME_CHARS
        || name.trim().is_empty()
        || name.chars().any(char::is_control)
    {
        return Err(ApiError::Validation(format!(
            "name must be 1 to {MAX_KEY_NAME_CHARS} printable characters"
        )));
    }
    Ok(name)
}

/// An expiry as given, checked: after `now`, and storable.
pub fn checked_expiry(
    expires_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    match expires_at {
        Some(t) if t <= now || !crate::month::storable(t) => Err(ApiError::Validation(
            "expires_at must be an RFC 3339 instant in the future (before year 10000), or null"
                .into(),
        )),
        other => Ok(other),
    }
}

/// Scopes as given, checked: a non-empty list of at most [`MAX_SCOPES`] paths, each
/// `/vedic/v1/` or `/western/v1/` or a longer path under one of them (no empty, `.` or
/// `..` segment, no query, no blanks), without repeats.
pub fn checked_scopes(scopes: Vec<String>) -> Result<Vec<String>, ApiError> {
    let refuse = |why: String| Err(ApiError::Validation(why));
    if scopes.is_empty() || scopes.len() > MAX_SCOPES {
        return refuse(format!("scopes must list 1 to {MAX_SCOPES} paths"));
    }
    let mut kept: Vec<String> = Vec::with_capacity(scopes.len());
    for scope in scopes {
        let under = ALL_SCOPES.iter().find_map(|p| scope.strip_prefix(p));
        let valid = scope.len() <= MAX_SCOPE_BYTES
            && under.is_some_and(|rest| {
                rest.split('/').enumerate().all(|(i, segment)| {
                    // Only the last segment may be empty (a scope ending in `/`).
                    let last = i == rest.split('/').count() - 1;
                    (last || !segment.is_empty())
                        && segment != "."
                        && segment != ".."
                        && segment
                            .bytes()
                            .all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'\\'))
                })
            });
        if !valid {
            return refuse(format!(
                "scopes: each must be /vedic/v1/ or /western/v1/ or a path under one of them \
                 (at most {MAX_SCOPE_BYTES} characters, no query)"
            ));
        }
        if !kept.contains(&scope) {
            kept.push(scope);
        }
    }
    Ok(kept)
}

/// Creates a key of `account_id`, refused past `max_keys` live ones (unrevoked and
/// unexpired): the count is taken under the account's row lock. Shared with the portal.
pub async fn create_account_key(
    db: &sqlx::PgPool,
    account_id: i64,
    max_keys: u32,
    settings: &KeySettings,
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
    tx.commit().await?;
    tracing::info!(account_id, key_id, "api key created");
    Ok(KeyCreated {
        key_id,
        api_key: key.reveal(),
    })
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
/// expiry), in one transaction. A revoked or expired key is `KEY_INACTIVE`; another
/// account's, `KEY_NOT_FOUND`. The new key replaces one: `account.max_keys` refuses it
/// only when the account's other live keys number that many already.
pub async fn roll(
    db: &sqlx::PgPool,
    keys: &KeyCache,
    account_id: i64,
    key_id: i64,
    grace_seconds: i64,
    max_keys: u32,
    now: DateTime<Utc>,
) -> Result<KeyRolled, ApiError> {
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

/// Drops a changed key from this replica's cache at once (the others hear the trigger).
fn forget_here(keys: &KeyCache, hash: &[u8]) {
    match <[u8; 32]>::try_from(hash) {
        Ok(hash) => keys.invalidate(&hash),
        Err(_) => keys.flush(),
    }
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
        forget_here(keys, &hash);
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
}

/// Changes `account_id`'s live key `key_id`; the key as it now is, `KEY_NOT_FOUND` when
/// the account has no such unrevoked key (a revoked key's settings no longer matter, and
/// are left as they were). This replica follows at once; the others hear the V14 and
/// V18 triggers. Shared by the account API and the portal.
pub async fn change_key(
    db: &sqlx::PgPool,
    keys: &KeyCache,
    key_limits: &KeyLimits,
    account_id: i64,
    key_id: i64,
    change: &KeyChange,
) -> Result<KeySummary, ApiError> {
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
    .fetch_optional(db)
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
        .fetch_one(db)
        .await?;
        return Err(if expired {
            ApiError::KeyInactive
        } else {
            ApiError::KeyNotFound
        });
    };
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
) -> Result<KeySummary, ApiError> {
    let change = KeyChange {
        monthly_limit: Some(monthly_limit),
        ..KeyChange::default()
    };
    change_key(db, keys, key_limits, account_id, key_id, &change).await
}
