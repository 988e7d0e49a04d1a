//! The usage listener: takes queued events in batches and has them accounted.
//!
//! Database errors never kill the task: while PostgreSQL is unreachable a batch waits
//! (the bounded queue decides what is dropped), a batch PostgreSQL refuses is retried
//! and then split so one bad event cannot take the others with it. Shutdown drains
//! what is queued within a bound.

use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::batch::Accountant;
use super::event::UsageEvent;
use crate::config::UsageCheckConfig;
use crate::error::anyhow_chain;

/// Delays between attempts at a batch the database refuses, before it is split
/// event by event.
const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(250),
    Duration::from_secs(1),
];

/// Longest wait between attempts while the database is unreachable.
const MAX_OUTAGE_BACKOFF: Duration = Duration::from_secs(5);

impl Accountant {
    /// Accounts a batch whatever it takes: while the database is unreachable the batch
    /// waits (new events queue up behind it, and the queue's bound decides what is
    /// dropped); a batch the database refuses is retried, then split so that one bad
    /// event cannot take the others with it.
    async fn account_resilient(&self, batch: &[UsageEvent]) {
        let mut refusals = 0;
        let mut outage_backoff = Duration::from_millis(100);
        let last_error = loop {
            match self.account(batch, Utc::now()).await {
                Ok(_) => return,
                Err(e) => {
                    metrics::counter!("tollgate_usage_listener_errors_total").increment(1);
                    tracing::warn!(events = batch.len(), transient = crate::db::is_transient(&e),
                        error = %anyhow_chain(&e), "usage batch failed");
                    if crate::db::is_transient(&e) {
                        tokio::time::sleep(outage_backoff).await;
                        outage_backoff = (outage_backoff * 2).min(MAX_OUTAGE_BACKOFF);
                    } else if let Some(delay) = RETRY_DELAYS.get(refusals) {
                        refusals += 1;
                        tokio::time::sleep(*delay).await;
                    } else {
                        break e;
                    }
                }
            }
        };
        if batch.len() == 1 {
            metrics::counter!("tollgate_usage_events_failed_total").increment(1);
            tracing::error!(transaction_id = %batch[0].transaction_id,
                account_id = batch[0].account_id,
                error = %anyhow_chain(&last_error),
                "usage event could not be accounted");
            return;
        }
        for event in batch {
            Box::pin(self.account_resilient(std::slice::from_ref(event))).await;
        }
    }
}

/// How the listener forms batches and drains on shutdown.
#[derive(Debug, Clone, Copy)]
pub struct ListenerSettings {
    /// Most events accounted in one transaction.
    pub batch_size: usize,
    /// How long a batch that is not full waits for more events after its first one.
    /// A few milliseconds of accounting lag turn a transaction per handful of calls
    /// into one per hundreds, which is what PostgreSQL's CPU and WAL pay for.
    pub batch_linger: Duration,
    /// Bound of the shutdown drain.
    pub drain_timeout: Duration,
}

impl ListenerSettings {
    pub fn from_config(config: &UsageCheckConfig) -> Self {
        Self {
            batch_size: config.batch_size,
            batch_linger: Duration::from_millis(config.batch_linger_ms),
            drain_timeout: Duration::from_millis(config.drain_timeout_ms),
        }
    }
}

/// Runs the listener until `stop` fires, then drains what is queued within the
/// settings' `drain_timeout`.
pub async fn run(
    accountant: Accountant,
    mut rx: mpsc::Receiver<UsageEvent>,
    settings: ListenerSettings,
    stop: CancellationToken,
) {
    let ListenerSettings {
        batch_size,
        batch_linger,
        drain_timeout,
    } = settings;
    let mut batch = Vec::with_capacity(batch_size);
    loop {
        let received = tokio::select! {
            n = rx.recv_many(&mut batch, batch_size) => n,
            _ = stop.cancelled() => break,
        };
        if received == 0 {
            break;
        }
        if batch.len() < batch_size && !batch_linger.is_zero() {
            let until = tokio::time::Instant::now() + batch_linger;
            while batch.len() < batch_size {
                let room = batch_size - batch.len();
                tokio::select! {
                    n = rx.recv_many(&mut batch, room) => if n == 0 { break },
                    _ = tokio::time::sleep_until(until) => break,
                    _ = stop.cancelled() => break,
                }
            }
        }
        record_batch(&batch, rx.len());
        // A batch stuck on an unreachable database must not hold shutdown up: on stop
        // the attempt is abandoned (its transaction rolls back) and the batch is
        // accounted by the bounded drain below.
        let done = tokio::select! {
            _ = accountant.account_resilient(&batch) => true,
            _ = stop.cancelled() => false,
        };
        if !done {
            break;
        }
        batch.clear();
    }

    rx.close();
    let drained = tokio::time::timeout(drain_timeout, async {
        if !batch.is_empty() {
            accountant.account_resilient(&batch).await;
            batch.clear();
        }
        while rx.recv_many(&mut batch, batch_size).await > 0 {
            record_batch(&batch, rx.len());
            accountant.account_resilient(&batch).await;
            batch.clear();
        }
    })
    .await;
    if drained.is_err() {
        let lost = batch.len() + rx.len();
        metrics::counter!("tollgate_usage_events_dropped_total", "reason" => "shutdown")
            .increment(lost as u64);
        tracing::error!(lost, "usage queue not drained before the shutdown deadline");
    } else {
        tracing::info!("usage queue drained");
    }
}

fn record_batch(batch: &[UsageEvent], depth: usize) {
    metrics::histogram!("tollgate_usage_batch_size").record(batch.len() as f64);
    metrics::gauge!("tollgate_usage_queue_depth").set(depth as f64);
}
