//! When each key was last used for a proxied call (`api_key.last_used_at`, SPEC §15).
//!
//! A call records its key's second in this replica's memory (a sharded map: one read
//! lock and an atomic store when the second changed); every [`FLUSH_EVERY`] the
//! replica writes what changed in one statement and starts over, so the column trails
//! the calls by at most that much plus the write, and a call never waits for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::telemetry::RateLimitedLog;

/// How often what the calls recorded is written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);
/// Shards of the map.
const SHARDS: usize = 32;

/// This replica's record. Cheap to clone.
#[derive(Clone, Default)]
pub struct LastUsed {
    seen: Arc<DashMap<i64, AtomicI64>>,
}

impl LastUsed {
    pub fn new() -> Self {
        Self {
            seen: Arc::new(DashMap::with_shard_amount(SHARDS)),
        }
    }

    /// Records a call through `key_id` at `now`.
    pub fn record(&self, key_id: i64, now: DateTime<Utc>) {
        let second = now.timestamp();
        if let Some(last) = self.seen.get(&key_id) {
            if last.load(Ordering::Relaxed) < second {
                last.store(second, Ordering::Relaxed);
            }
            return;
        }
        self.seen
            .entry(key_id)
            .or_insert_with(|| AtomicI64::new(second))
            .fetch_max(second, Ordering::Relaxed);
    }

    /// Takes what was recorded since the last take.
    fn take(&self) -> (Vec<i64>, Vec<DateTime<Utc>>) {
        let mut keys = Vec::new();
        let mut at = Vec::new();
        self.seen.retain(|key_id, second| {
            if let Some(t) = DateTime::from_timestamp(second.load(Ordering::Relaxed), 0) {
                keys.push(*key_id);
                at.push(t);
            }
            false
        });
        (keys, at)
    }

    /// Writes what was recorded; a key's column only moves forward.
    pub async fn flush(&self, db: &PgPool) -> Result<usize, sqlx::Error> {
        let (keys, at) = self.take();
        if keys.is_empty() {
            return Ok(0);
        }
        let result = sqlx::query!(
            "UPDATE api_key k SET last_used_at = u.at
             FROM unnest($1::bigint[], $2::timestamptz[]) AS u(id, at)
             WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)",
            &keys,
            &at,
        )
        .execute(db)
        .await;
        if result.is_err() {
            // Keep them for the next try.
            for (key_id, t) in keys.iter().zip(&at) {
                self.record(*key_id, *t);
            }
        }
        result.map(|_| keys.len())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_keeps_its_latest_second() {
        let record = LastUsed::new();
        let t = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        record.record(7, t(100));
        record.record(7, t(90));
        record.record(8, t(50));
        record.record(7, t(120));
        let (mut keys, mut at) = record.take();
        let mut pairs: Vec<_> = keys.drain(..).zip(at.drain(..)).collect();
        pairs.sort();
        assert_eq!(pairs, vec![(7, t(120)), (8, t(50))]);
        assert_eq!(record.take().0, Vec::<i64>::new());
    }
}
