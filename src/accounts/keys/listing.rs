//! The account's keys as listed: settings, last use and this month's units.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::key_policy::ALL_SCOPES;
use crate::month::Month;
use crate::plan::RateLimit;

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
                  coalesce((SELECT sum(r.units) FROM usage_rollup r
                            WHERE r.key_id = k.id AND r.day >= $4 AND r.day < $5), 0)::bigint
                      AS "used!"
           FROM api_key k
           WHERE k.account_id = $1 AND k.id > $2 ORDER BY k.id LIMIT $3"#,
        account_id,
        after,
        limit,
        month.start().date_naive(),
        month.end().date_naive(),
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
