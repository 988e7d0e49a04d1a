//! What both accounting drivers share, the in-process listener (`listener.rs`) and the
//! JetStream consumer (`jetstream/consumer.rs`): how batches are sized and split into
//! account lanes, how a batch is accounted whatever the database does, and the events
//! set aside while their account's row lock is held elsewhere.
//!
//! Database errors never kill a driver: while PostgreSQL is unreachable (or read-only,
//! as during a failover) a batch waits (the bounded queue or the stream decides what
//! waits with it), a batch PostgreSQL refuses is retried and then split so one bad
//! event cannot take the others with it. A row lock held elsewhere delays only its own
//! account: past `usage_check.lock_timeout_ms` the batch accounts every other account
//! and sets the locked accounts' events aside, retried apart from the batches; the
//! [`Deferred`] returned say which events were set aside and when they are settled.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::event::UsageEvent;
use super::ledger::{Accountant, Locks};
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

/// Accounts a batch whatever it takes: while the database is unreachable the batch
/// waits (new events queue up behind it, and the queue's bound decides what is
/// dropped); a batch the database refuses is retried, then split so that one bad
/// event cannot take the others with it. Every event is settled on return (in the
/// ledger, or given up on and counted) except those set aside, which the returned
/// [`Deferred`] name.
pub(crate) async fn account_resilient(
    accountant: &Accountant,
    batch: &[UsageEvent],
    set_aside: &SetAside,
) -> Vec<Deferred> {
    let mut refusals = 0;
    let mut outage_backoff = Duration::from_millis(100);
    let mut locks = Locks::Wait;
    let last_error = loop {
        match accountant.account_now(batch, locks).await {
            Ok(outcome) => {
                if outcome.busy.is_empty() {
                    return Vec::new();
                }
                let busy: HashSet<i64> = outcome.busy.into_iter().collect();
                let waiting = batch
                    .iter()
                    .filter(|e| busy.contains(&e.account_id))
                    .cloned()
                    .collect();
                return vec![set_aside.hold(accountant.clone(), waiting)];
            }
            // A row lock held elsewhere: account everyone else now.
            Err(e) if locks == Locks::Wait && crate::db::is_lock_timeout(&e) => {
                tracing::info!(
                    events = batch.len(),
                    "an account's row lock is held elsewhere; accounting the others"
                );
                locks = Locks::SkipBusy;
            }
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
        return Vec::new();
    }
    let mut deferred = Vec::new();
    for event in batch {
        deferred.extend(
            Box::pin(account_resilient(
                accountant,
                std::slice::from_ref(event),
                set_aside,
            ))
            .await,
        );
    }
    deferred
}

/// Accounts `batch` as up to `lanes` concurrent transactions over disjoint sets of
/// accounts (by account id), which never wait for each other's row locks. Returns
/// the events set aside, as [`account_resilient`] does.
/// The batch is reordered by lane in place (a stable sort: each account's events
/// keep their order), so no event is copied.
pub(crate) async fn account_in_lanes(
    accountant: &Accountant,
    batch: &mut [UsageEvent],
    lanes: usize,
    set_aside: &SetAside,
) -> Vec<Deferred> {
    let lanes = lanes.max(1);
    if lanes == 1 {
        return account_resilient(accountant, batch, set_aside).await;
    }
    let lane_of = |event: &UsageEvent| event.account_id.rem_euclid(lanes as i64) as usize;
    batch.sort_by_key(lane_of);
    let work = batch
        .chunk_by(|a, b| lane_of(a) == lane_of(b))
        .map(|lane| account_resilient(accountant, lane, set_aside));
    let deferred = futures_util::future::join_all(work).await;
    deferred.into_iter().flatten().collect()
}

/// Events set aside because their account's row lock was held elsewhere.
pub(crate) struct Deferred {
    pub transaction_ids: Vec<Uuid>,
    /// Resolves once they are settled (in the ledger, or given up on and counted); an
    /// error when they never will be by this process (set-aside capacity exceeded, or
    /// shutdown came first).
    pub settled: oneshot::Receiver<()>,
}

/// Events of accounts whose row lock is held elsewhere, retried apart from the queue
/// so they hold up no batch. Bounded like the queue: past `capacity` events waiting,
/// more are dropped and counted.
#[derive(Clone)]
pub(crate) struct SetAside {
    tasks: TaskTracker,
    room: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
}

/// Most events set aside at once (as many as the default queue holds).
pub(crate) const SET_ASIDE_CAPACITY: usize = 10_000;

/// Longest pause between attempts at set-aside events.
const MAX_SET_ASIDE_BACKOFF: Duration = Duration::from_secs(2);

impl SetAside {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            tasks: TaskTracker::new(),
            room: Arc::new(Semaphore::new(capacity.max(1))),
            waiting: Arc::default(),
        }
    }

    /// Events waiting here now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Waits until every event set aside is settled; nothing can be set aside after.
    pub(crate) async fn settle(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    fn hold(&self, accountant: Accountant, mut events: Vec<UsageEvent>) -> Deferred {
        let (done, settled) = oneshot::channel();
        let deferred = Deferred {
            transaction_ids: events.iter().map(|e| e.transaction_id).collect(),
            settled,
        };
        let n = events.len();
        let Ok(permit) = self.room.clone().try_acquire_many_owned(n as u32) else {
            metrics::counter!("tollgate_usage_events_dropped_total", "reason" => "set_aside_full")
                .increment(n as u64);
            tracing::error!(
                events = n,
                "set-aside usage events over capacity: events lost"
            );
            return deferred;
        };
        self.waiting.fetch_add(n, Ordering::Relaxed);
        metrics::gauge!("tollgate_usage_events_set_aside").increment(n as f64);
        let (waiting, this) = (self.waiting.clone(), self.clone());
        self.tasks.spawn(async move {
            let mut delay = Duration::from_millis(50);
            let mut nested = Vec::new();
            while !events.is_empty() {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_SET_ASIDE_BACKOFF);
                match accountant.account_now(&events, Locks::SkipBusy).await {
                    Ok(outcome) => {
                        let busy: HashSet<i64> = outcome.busy.into_iter().collect();
                        events.retain(|e| busy.contains(&e.account_id));
                    }
                    Err(e) if crate::db::is_transient(&e) => {}
                    // Refused for its data: the usual retries and split, once.
                    Err(_) => {
                        nested = Box::pin(account_resilient(&accountant, &events, &this)).await;
                        events.clear();
                    }
                }
            }
            waiting.fetch_sub(n, Ordering::Relaxed);
            metrics::gauge!("tollgate_usage_events_set_aside").decrement(n as f64);
            drop(permit);
            let mut all_settled = true;
            for d in nested {
                all_settled &= d.settled.await.is_ok();
            }
            if all_settled {
                let _ = done.send(());
            }
        });
        deferred
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
    /// Most batches accounted at once.
    pub concurrent_batches: usize,
    /// Transactions a batch is split into, by account, accounted concurrently.
    pub account_lanes: usize,
    /// Bound of the shutdown drain.
    pub drain_timeout: Duration,
}

/// How many times `batch_size` a batch grows to while a backlog waits.
const BATCH_GROWTH: usize = 4;

impl ListenerSettings {
    /// Most events one batch holds while a backlog waits: a loaded gateway writes fewer,
    /// larger transactions, each paying its fixed statements and commit once.
    pub fn max_batch(&self) -> usize {
        self.batch_size.max(1).saturating_mul(BATCH_GROWTH)
    }

    /// The size of the next batch when `backlog` events are waiting: `batch_size`, grown
    /// with the backlog up to [`max_batch`](Self::max_batch).
    pub fn batch_for(&self, backlog: usize) -> usize {
        backlog.clamp(self.batch_size.max(1), self.max_batch())
    }

    /// The configured settings, with the listener's transactions
    /// (`concurrent_batches × account_lanes`) kept below `max_connections` so that
    /// requests always find a database connection.
    pub fn from_config(config: &UsageCheckConfig, max_connections: u32) -> Self {
        let mut settings = Self {
            batch_size: config.batch_size,
            batch_linger: Duration::from_millis(config.batch_linger_ms),
            concurrent_batches: config.concurrent_batches.max(1),
            account_lanes: config.account_lanes.max(1),
            drain_timeout: Duration::from_millis(config.drain_timeout_ms),
        };
        let budget = (max_connections as usize).saturating_sub(1).max(1);
        if settings.concurrent_batches * settings.account_lanes > budget {
            settings.account_lanes = settings.account_lanes.min(budget);
            settings.concurrent_batches = (budget / settings.account_lanes).max(1);
            tracing::warn!(
                max_connections,
                concurrent_batches = settings.concurrent_batches,
                account_lanes = settings.account_lanes,
                "usage accounting narrowed to leave database connections for requests"
            );
        }
        settings
    }
}

/// Accounts `batch` through [`account_in_lanes`]; `None` when accounting panicked. Every
/// database error is handled inside, so a panic is a bug: the batch is counted as
/// failed and not retried into it again.
pub(crate) async fn account_guarded(
    accountant: &Accountant,
    batch: &mut [UsageEvent],
    lanes: usize,
    set_aside: &SetAside,
) -> Option<Vec<Deferred>> {
    let events = batch.len();
    let accounting = AssertUnwindSafe(account_in_lanes(accountant, batch, lanes, set_aside));
    match accounting.catch_unwind().await {
        Ok(deferred) => Some(deferred),
        Err(_) => {
            metrics::counter!("tollgate_usage_events_failed_total").increment(events as u64);
            tracing::error!(events, "usage accounting panicked");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(batches: usize, lanes: usize, max_connections: u32) -> (usize, usize) {
        let config = UsageCheckConfig {
            concurrent_batches: batches,
            account_lanes: lanes,
            ..Default::default()
        };
        let s = ListenerSettings::from_config(&config, max_connections);
        (s.concurrent_batches, s.account_lanes)
    }

    #[test]
    fn accounting_leaves_database_connections_for_requests() {
        assert_eq!(settings(2, 2, 16), (2, 2));
        assert_eq!(settings(2, 2, 4), (1, 2));
        assert_eq!(settings(8, 4, 16), (3, 4));
        assert_eq!(settings(2, 2, 2), (1, 1));
        assert_eq!(settings(2, 2, 1), (1, 1));
    }

    #[test]
    fn batches_grow_with_the_backlog_up_to_a_bound() {
        let s = ListenerSettings::from_config(&UsageCheckConfig::default(), 16);
        assert_eq!(s.batch_for(0), s.batch_size);
        assert_eq!(s.batch_for(s.batch_size + 1), s.batch_size + 1);
        assert_eq!(s.batch_for(usize::MAX), s.batch_size * BATCH_GROWTH);
    }
}
