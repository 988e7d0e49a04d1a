//! Where markers are kept: Cloudflare Workers KV (shared), process memory (one
//! replica), or nowhere (Cloudflare not configured: every operation fails open).
//!
//! Marker keys are `usage-exhausted:<account_id>:<month_start_unix>`; the value is
//! unused (`"1"`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use crate::cloudflare::{KvClient, KvError};
use crate::month::{Day, Month};
use crate::sync::lock;

pub const MARKER_PREFIX: &str = "usage-exhausted:";
/// Prefix of the daily window's markers (SPEC §6).
pub const DAILY_MARKER_PREFIX: &str = "usage-exhausted-daily:";
const MARKER_VALUE: &[u8] = b"1";

/// The marker key of an account and month.
pub fn marker_key(account_id: i64, month: Month) -> String {
    format!("{MARKER_PREFIX}{account_id}:{}", month.start_unix())
}

/// The daily marker key of an account and UTC day.
pub fn daily_marker_key(account_id: i64, day: Day) -> String {
    format!("{DAILY_MARKER_PREFIX}{account_id}:{}", day.start_unix())
}

/// The account of a daily marker key of `day`; `None` for other keys.
pub fn parse_daily_marker_key(key: &str, day: Day) -> Option<i64> {
    let (account, suffix) = key.strip_prefix(DAILY_MARKER_PREFIX)?.split_once(':')?;
    (suffix.parse::<i64>().ok()? == day.start_unix())
        .then(|| account.parse().ok())
        .flatten()
}

/// A daily marker expires at the day's end, and never less than 60 s after `sent_at`.
pub fn daily_marker_expiration(day: Day, sent_at: DateTime<Utc>) -> i64 {
    let sent_secs = sent_at.timestamp() + i64::from(sent_at.timestamp_subsec_nanos() > 0);
    day.end().timestamp().max(sent_secs + MIN_EXPIRATION_SECS)
}

/// KV refuses expirations less than 60 s away.
const MIN_EXPIRATION_SECS: i64 = 60;

/// `expiration = max(month_end, sent_at + 60)`, in unix seconds, `sent_at` rounded up,
/// so KV never sees an expiration less than 60 s away. `sent_at` is when the write
/// leaves ([`sending_at`]), not when the exhaustion was decided.
pub fn marker_expiration(month: Month, sent_at: DateTime<Utc>) -> i64 {
    let sent_secs = sent_at.timestamp() + i64::from(sent_at.timestamp_subsec_nanos() > 0);
    month.end().timestamp().max(sent_secs + MIN_EXPIRATION_SECS)
}

/// The instant a write decided at `decided` leaves: now, or `decided` when a test's
/// clock stands ahead of the machine's.
pub fn sending_at(decided: DateTime<Utc>) -> DateTime<Utc> {
    decided.max(Utc::now())
}

/// The account of a marker key of `month`; `None` for other months or foreign keys.
pub fn parse_marker_key(key: &str, month: Month) -> Option<i64> {
    let rest = key.strip_prefix(MARKER_PREFIX)?;
    let (account, suffix) = rest.rsplit_once(':')?;
    if suffix.parse::<i64>().ok()? != month.start_unix() {
        return None;
    }
    account.parse().ok()
}

/// Why a store operation failed; every failure fails open.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cloudflare KV is not configured")]
    Unconfigured,
    #[error(transparent)]
    Kv(#[from] KvError),
}

impl StoreError {
    /// Short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::Unconfigured => "unconfigured",
            StoreError::Kv(KvError::BudgetExhausted) => "budget",
            StoreError::Kv(KvError::RateLimited { .. } | KvError::BackingOff) => "rate_limited",
            StoreError::Kv(KvError::Timeout) => "timeout",
            StoreError::Kv(_) => "kv_error",
        }
    }
}

/// A marker store.
#[derive(Clone)]
pub enum MarkerStore {
    Cloudflare(KvClient),
    Memory(Arc<Mutex<HashMap<String, i64>>>),
    Unconfigured,
}

impl MarkerStore {
    pub fn memory() -> Self {
        MarkerStore::Memory(Default::default())
    }

    pub async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        match self {
            MarkerStore::Cloudflare(kv) => Ok(kv.get(key).await?.is_some()),
            MarkerStore::Memory(map) => Ok(lock(map).contains_key(key)),
            MarkerStore::Unconfigured => Err(StoreError::Unconfigured),
        }
    }

    pub async fn put(&self, key: &str, expiration_unix: i64) -> Result<(), StoreError> {
        match self {
            MarkerStore::Cloudflare(kv) => {
                Ok(kv.put(key, MARKER_VALUE, Some(expiration_unix)).await?)
            }
            MarkerStore::Memory(map) => {
                lock(map).insert(key.to_owned(), expiration_unix);
                Ok(())
            }
            MarkerStore::Unconfigured => Err(StoreError::Unconfigured),
        }
    }

    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self {
            MarkerStore::Cloudflare(kv) => Ok(kv.delete(key).await?),
            MarkerStore::Memory(map) => {
                lock(map).remove(key);
                Ok(())
            }
            MarkerStore::Unconfigured => Err(StoreError::Unconfigured),
        }
    }

    /// Every key under [`MARKER_PREFIX`] (all months).
    pub async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.list_prefix(MARKER_PREFIX).await
    }

    /// Every key under [`DAILY_MARKER_PREFIX`] (all days).
    pub async fn list_daily(&self) -> Result<Vec<String>, StoreError> {
        self.list_prefix(DAILY_MARKER_PREFIX).await
    }

    /// The accounts marked for `day` (daily markers), from one listing.
    pub async fn marked_today(&self, day: Day) -> Result<HashSet<i64>, StoreError> {
        Ok(self
            .list_prefix(DAILY_MARKER_PREFIX)
            .await?
            .iter()
            .filter_map(|k| parse_daily_marker_key(k, day))
            .collect())
    }

    async fn list_prefix(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        match self {
            MarkerStore::Cloudflare(kv) => Ok(kv
                .list_all(prefix)
                .await?
                .into_iter()
                .map(|k| k.name)
                .collect()),
            MarkerStore::Memory(map) => {
                // Expired markers go, as they would in KV.
                let now = chrono::Utc::now().timestamp();
                let mut map = lock(map);
                map.retain(|_, expiration| *expiration > now);
                Ok(map
                    .keys()
                    .filter(|k| k.starts_with(prefix))
                    .cloned()
                    .collect())
            }
            MarkerStore::Unconfigured => Err(StoreError::Unconfigured),
        }
    }

    /// The accounts marked for `month`, from one listing.
    pub async fn marked_accounts(&self, month: Month) -> Result<HashSet<i64>, StoreError> {
        Ok(self
            .list()
            .await?
            .iter()
            .filter_map(|k| parse_marker_key(k, month))
            .collect())
    }

    /// Writes many markers; Cloudflare's bulk endpoint when there are many, one call
    /// per key when there are few or when the bulk endpoint is not offered.
    pub async fn put_many(&self, keys: &[String], expiration_unix: i64) -> Result<(), StoreError> {
        if let MarkerStore::Cloudflare(kv) = self
            && keys.len() > BULK_THRESHOLD
        {
            let items: Vec<_> = keys
                .iter()
                .map(|k| crate::cloudflare::BulkWrite {
                    key: k.clone(),
                    value: "1".into(),
                    expiration: Some(expiration_unix),
                })
                .collect();
            match kv.bulk_put(&items).await {
                Err(e) if bulk_unsupported(&e) => {
                    tracing::info!("KV bulk write not offered; writing key by key");
                }
                other => return Ok(other?),
            }
        }
        for key in keys {
            self.put(key, expiration_unix).await?;
        }
        Ok(())
    }

    /// Deletes many markers, like [`MarkerStore::put_many`].
    pub async fn delete_many(&self, keys: &[String]) -> Result<(), StoreError> {
        if let MarkerStore::Cloudflare(kv) = self
            && keys.len() > BULK_THRESHOLD
        {
            match kv.bulk_delete(keys).await {
                Err(e) if bulk_unsupported(&e) => {
                    tracing::info!("KV bulk delete not offered; deleting key by key");
                }
                other => return Ok(other?),
            }
        }
        for key in keys {
            self.delete(key).await?;
        }
        Ok(())
    }
}

/// A KV server without the bulk endpoints (SPEC §5 names only the single-key ones).
fn bulk_unsupported(err: &KvError) -> bool {
    matches!(
        err,
        KvError::Api {
            status: 404 | 405 | 501,
            ..
        }
    )
}

/// Above this many keys, reconciliation uses the bulk endpoints (one call per chunk).
const BULK_THRESHOLD: usize = 10;

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn markers_expire_at_the_month_end() {
        let nov: Month = "2026-11".parse().unwrap();
        assert_eq!(
            marker_expiration(nov, at("2026-11-15T00:00:00Z")),
            nov.end().timestamp()
        );
    }

    #[test]
    fn in_the_last_minute_of_a_month_markers_live_sixty_seconds() {
        let nov: Month = "2026-11".parse().unwrap();
        let now = at("2026-11-30T23:59:30Z");
        assert_eq!(marker_expiration(nov, now), now.timestamp() + 60);
        let fraction = at("2026-11-30T23:59:30.2Z");
        assert_eq!(marker_expiration(nov, fraction), now.timestamp() + 61);
        let last_second = at("2026-11-30T23:59:59.999Z");
        assert_eq!(
            marker_expiration(nov, last_second),
            nov.end().timestamp() + 60
        );
    }

    #[test]
    fn a_write_decided_in_the_past_leaves_now() {
        let stale = Utc::now() - chrono::Duration::hours(1);
        let month = Month::containing(stale);
        assert!(marker_expiration(month, sending_at(stale)) >= Utc::now().timestamp() + 60);
    }

    #[test]
    fn daily_marker_keys_follow_the_spec_and_expire_at_the_day_end() {
        let day = Day::containing(at("2026-11-30T12:00:00Z"));
        let key = daily_marker_key(42, day);
        assert_eq!(
            key,
            format!("usage-exhausted-daily:42:{}", day.start_unix())
        );
        assert_eq!(parse_daily_marker_key(&key, day), Some(42));
        assert_eq!(parse_marker_key(&key, day.month()), None);
        assert_eq!(
            daily_marker_expiration(day, at("2026-11-30T12:00:00Z")),
            day.end().timestamp()
        );
        let late = at("2026-11-30T23:59:30Z");
        assert_eq!(daily_marker_expiration(day, late), late.timestamp() + 60);
    }

    #[test]
    fn marker_keys_follow_the_spec() {
        let dec: Month = "2026-12".parse().unwrap();
        assert_eq!(marker_key(42, dec), "usage-exhausted:42:1796083200");
    }

    #[test]
    fn only_keys_of_the_given_month_parse() {
        let dec: Month = "2026-12".parse().unwrap();
        assert_eq!(
            parse_marker_key("usage-exhausted:42:1796083200", dec),
            Some(42)
        );
        assert_eq!(parse_marker_key("usage-exhausted:42:1793491200", dec), None);
        assert_eq!(parse_marker_key("other:42:1796083200", dec), None);
        assert_eq!(parse_marker_key("usage-exhausted:x:1796083200", dec), None);
    }
}
