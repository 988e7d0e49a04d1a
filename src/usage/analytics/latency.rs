//! The rollup's latency histograms, merged into `usage_rollup` every few seconds rather
//! than by every accounting batch.
//!
//! Merging two histograms is the one costly part of a rollup row: PostgreSQL adds two
//! arrays of a hundred-odd buckets element by element (`usage_hist_add`), about 37 µs per
//! row against 10 µs for the row's counts, and at 10,000 accounts nearly every event of a
//! batch is a row of its own. So a batch writes its calls, units and 5xx answers in its
//! own transaction, exactly as the ledger says, and hands the latencies it saw, once
//! committed, to [`PendingLatencies`]; every `analytics.latency_flush_ms` they are
//! merged into their rows in one statement, however many batches touched each row
//! meanwhile. Latencies are statistics, not money: a process that dies loses at most
//! that interval's samples, never a call or a unit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::NaiveDate;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::histogram::{Histogram, array_literal};
use crate::sync::lock;

/// A rollup row: its key, UTC day and route.
pub type RowKey = (i64, NaiveDate, String);

/// Rows at most waiting for a merge; past it, a batch's samples are dropped (counted).
const MAX_PENDING_ROWS: usize = 500_000;

/// Latencies accounted but not yet merged into their rollup rows. Cheap to clone.
#[derive(Clone, Default)]
pub struct PendingLatencies {
    rows: Arc<Mutex<HashMap<RowKey, Histogram>>>,
}

impl PendingLatencies {
    /// Adds the latencies of rows a batch just committed.
    pub fn add(&self, committed: Vec<(RowKey, Histogram)>) {
        if committed.is_empty() {
            return;
        }
        let mut rows = lock(&self.rows);
        for (key, histogram) in committed {
            if rows.len() >= MAX_PENDING_ROWS && !rows.contains_key(&key) {
                metrics::counter!("tollgate_latency_samples_dropped_total")
                    .increment(u64::try_from(histogram.total()).unwrap_or(0));
                continue;
            }
            rows.entry(key).or_default().add(histogram.counts());
        }
    }

    /// Merges what is pending into `usage_rollup`; the rows merged. On failure the
    /// samples are put back, to be merged next time.
    pub async fn flush(&self, db: &PgPool) -> Result<usize, sqlx::Error> {
        let taken = std::mem::take(&mut *lock(&self.rows));
        if taken.is_empty() {
            return Ok(0);
        }
        let mut keys = Vec::with_capacity(taken.len());
        let mut days = Vec::with_capacity(taken.len());
        let mut routes = Vec::with_capacity(taken.len());
        let mut latencies = Vec::with_capacity(taken.len());
        for ((key_id, day, route), histogram) in &taken {
            keys.push(*key_id);
            days.push(*day);
            routes.push(route.clone());
            latencies.push(array_literal(histogram.counts()));
        }
        let merged = sqlx::query!(
            "UPDATE usage_rollup r SET latency = usage_hist_add(r.latency, u.latency::integer[])
             FROM UNNEST($1::bigint[], $2::date[], $3::text[], $4::text[])
                 AS u(key_id, day, route, latency)
             WHERE r.key_id = u.key_id AND r.day = u.day AND r.route = u.route",
            &keys,
            &days,
            &routes,
            &latencies,
        )
        .execute(db)
        .await;
        match merged {
            Ok(_) => Ok(taken.len()),
            Err(e) => {
                self.add(taken.into_iter().collect());
                Err(e)
            }
        }
    }

    /// Merges every `every` until `stop`, then once more.
    pub fn start(&self, db: PgPool, every: Duration, stop: CancellationToken) -> JoinHandle<()> {
        let pending = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let stopping = tokio::select! {
                    _ = stop.cancelled() => true,
                    _ = tick.tick() => false,
                };
                if let Err(e) = pending.flush(&db).await {
                    tracing::warn!(error = %e, "merging latency histograms failed; kept for the next try");
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
    fn samples_of_one_row_from_several_batches_wait_as_one_histogram() {
        let pending = PendingLatencies::default();
        let day = NaiveDate::from_ymd_opt(2026, 12, 8).unwrap();
        let row = |key| (key, day, "/vedic/v1/x".to_owned());
        let sample = |micros| {
            let mut h = Histogram::default();
            h.record(micros);
            h
        };
        pending.add(vec![(row(1), sample(1_000)), (row(2), sample(5_000))]);
        pending.add(vec![(row(1), sample(1_000))]);
        let rows = lock(&pending.rows);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[&row(1)].total(), 2);
        assert_eq!(rows[&row(2)].total(), 1);
    }
}
