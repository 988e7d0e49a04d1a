//! When each key was last used for a proxied call (`api_key.last_used_at`, SPEC §15).
//!
//! A forwarded call stores its second in its key's last-use cell (one atomic store,
//! kept with the key's cache entry: [`KeyCache::use_of`]); every [`FLUSH_EVERY`] this
//! replica writes the cells that moved in one statement, so the column trails the calls
//! by at most that much plus the write, and a call never waits for it. Cells no cache
//! entry holds any more, with nothing left to write, are dropped.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::key_cache::KeyCache;
use crate::telemetry::RateLimitedLog;

/// How often what the calls recorded is written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);

/// This replica's writer of the keys' last use. Cheap to clone.
#[derive(Clone)]
pub struct LastUsed {
    keys: KeyCache,
    /// The second last written per key.
    written: Arc<Mutex<HashMap<i64, i64>>>,
}

impl LastUsed {
    pub fn new(keys: KeyCache) -> Self {
        Self {
            keys,
            written: Arc::default(),
        }
    }

    /// Writes the cells that moved since the last write; a key's column only moves
    /// forward. How many keys were written.
    pub async fn flush(&self, db: &PgPool) -> Result<usize, sqlx::Error> {
        let mut written = self.written.lock().await;
        let mut keys = Vec::new();
        let mut at: Vec<DateTime<Utc>> = Vec::new();
        self.keys.uses().retain(|key_id, cell| {
            let second = cell.load(Ordering::Relaxed);
            let last = written.get(key_id).copied().unwrap_or(0);
            if second > last
                && let Some(t) = DateTime::from_timestamp(second, 0)
            {
                keys.push(*key_id);
                at.push(t);
                return true;
            }
            // Nothing to write, and no cache entry or call holds the cell: let it go.
            let held = Arc::strong_count(cell) > 1;
            if !held {
                written.remove(key_id);
            }
            held
        });
        if keys.is_empty() {
            return Ok(0);
        }
        sqlx::query!(
            "UPDATE api_key k SET last_used_at = u.at
             FROM unnest($1::bigint[], $2::timestamptz[]) AS u(id, at)
             WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)",
            &keys,
            &at,
        )
        .execute(db)
        .await?;
        for (key_id, t) in keys.iter().zip(&at) {
            written.insert(*key_id, t.timestamp());
        }
        Ok(keys.len())
    }

    /// Flushes every [`FLUSH_EVERY`] until `stop`, and once more then.
    pub fn start(&self, db: PgPool, stop: CancellationToken) -> JoinHandle<()> {
        let record = self.clone();
        tokio::spawn(async move {
            let log = RateLimitedLog::default();
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let stopping = tokio::select! {
                    _ = stop.cancelled() => true,
                    _ = tick.tick() => false,
                };
                if let Err(e) = record.flush(&db).await
                    && log.allow()
                {
                    tracing::warn!(error = %e, suppressed = log.take_suppressed(),
                        "writing keys' last use failed; kept for the next try");
                }
                if stopping {
                    return;
                }
            }
        })
    }
}
