//! The usage listener: takes queued events in batches (waiting a short linger for a
//! fuller one) and has up to `concurrent_batches` of them accounted at once, each split
//! by account into `account_lanes` concurrent transactions.
//!
//! Database errors never kill the task: while PostgreSQL is unreachable (or read-only,
//! as during a failover) a batch waits (the bounded queue decides what is dropped), a
//! batch PostgreSQL refuses is retried and then split so one bad event cannot take the
//! others with it. A row lock held elsewhere delays only its own account: past
//! `usage_check.lock_timeout_ms` the batch accounts every other account and sets the
//! locked accounts' events aside, retried apart from the queue. Shutdown drains what
//! is queued and what is set aside within a bound.
//!
//! The JetStream consumer (`usage::jetstream`) accounts its pulled batches through the
//! same [`Accountant::account_in_lanes`]; the [`Deferred`] it returns say which events
//! were set aside and when they are settled, so their messages are acknowledged then.

use std::collections::{HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
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

impl Accountant {
    /// Accounts a batch whatever it takes: while the database is unreachable the batch
    /// waits (new events queue up behind it, and the queue's bound decides what is
    /// dropped); a batch the database refuses is retried, then split so that one bad
    /// event cannot take the others with it. Every event is settled on return (in the
    /// ledger, or given up on and counted) except those set aside, which the returned
    /// [`Deferred`] name.
    async fn account_resilient(&self, batch: &[UsageEvent], set_aside: &SetAside) -> Vec<Deferred> {
        let mut refusals = 0;
        let mut outage_backoff = Duration::from_millis(100);
        let mut locks = Locks::Wait;
        let last_error = loop {
            match self.account_now(batch, locks).await {
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
                    return vec![set_aside.hold(self.clone(), waiting)];
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
                Box::pin(self.account_resilient(std::slice::from_ref(event), set_aside)).await,
            );
        }
        deferred
    }

    /// Accounts `batch` as up to `lanes` concurrent transactions over disjoint sets of
    /// accounts (by account id), which never wait for each other's row locks. Returns
    /// the events set aside, as [`account_resilient`](Self::account_resilient) does.
    /// The batch is reordered by lane in place (a stable sort: each account's events
    /// keep their order), so no event is copied.
    pub(crate) async fn account_in_lanes(
        &self,
        batch: &mut [UsageEvent],
        lanes: usize,
        set_aside: &SetAside,
    ) -> Vec<Deferred> {
        let lanes = lanes.max(1);
        if lanes == 1 {
            return self.account_resilient(batch, set_aside).await;
        }
        let lane_of = |event: &UsageEvent| event.account_id.rem_euclid(lanes as i64) as usize;
        batch.sort_by_key(lane_of);
        let work = batch
            .chunk_by(|a, b| lane_of(a) == lane_of(b))
            .map(|lane| self.account_resilient(lane, set_aside));
        let deferred = futures_util::future::join_all(work).await;
        deferred.into_iter().flatten().collect()
    }
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
                        nested = Box::pin(accountant.account_resilient(&events, &this)).await;
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

/// Runs the listener until `stop` fires, then drains what is queued within the
/// settings' `drain_timeout`.
///
/// Up to `concurrent_batches` batches are accounted at once, each in its own
/// transaction on its own connection. Their order does not matter: ledger rows are
/// idempotent, counters add up, and account rows are locked in id order, so batches
/// that share accounts wait for each other instead of deadlocking.
pub async fn run(
    accountant: Accountant,
    mut rx: mpsc::Receiver<UsageEvent>,
    settings: ListenerSettings,
    stop: CancellationToken,
) {
    let set_aside = SetAside::new(SET_ASIDE_CAPACITY);
    let mut in_flight: JoinSet<Option<Vec<UsageEvent>>> = JoinSet::new();
    // Batches handed back unaccounted on stop, for the drain.
    let mut pending: VecDeque<Vec<UsageEvent>> = VecDeque::new();
    loop {
        while in_flight.len() >= settings.concurrent_batches.max(1) {
            tokio::select! {
                Some(done) = in_flight.join_next() => pending.extend(handed_back(done)),
                _ = stop.cancelled() => break,
            }
        }
        if stop.is_cancelled() {
            break;
        }
        let batch = next_batch(&mut rx, &settings, &stop).await;
        if batch.is_empty() {
            break;
        }
        record_batch(&batch, rx.len());
        // A batch stuck on an unreachable database must not hold shutdown up: on stop
        // the attempt is abandoned (its transaction rolls back) and the batch is
        // accounted by the bounded drain below.
        let (accountant, stop, set_aside) = (accountant.clone(), stop.clone(), set_aside.clone());
        let lanes = settings.account_lanes;
        in_flight.spawn(async move {
            let mut batch = batch;
            let accounting =
                AssertUnwindSafe(accountant.account_in_lanes(&mut batch, lanes, &set_aside));
            tokio::select! {
                done = accounting.catch_unwind() => {
                    if done.is_err() {
                        // `account_resilient` handles every database error itself: a
                        // panic is a bug, and the batch is not retried into it again.
                        metrics::counter!("tollgate_usage_events_failed_total")
                            .increment(batch.len() as u64);
                        tracing::error!(events = batch.len(), "usage accounting panicked");
                    }
                    None
                }
                // Lanes that committed are accounted again by the drain: a no-op, since
                // ledger rows are idempotent and counters count inserted rows only.
                _ = stop.cancelled() => Some(batch),
            }
        });
    }
    while let Some(done) = in_flight.join_next().await {
        pending.extend(handed_back(done));
    }

    rx.close();
    let deadline = tokio::time::Instant::now() + settings.drain_timeout;
    let drained = tokio::time::timeout_at(deadline, async {
        loop {
            if pending.is_empty() {
                let mut batch = Vec::with_capacity(settings.batch_size);
                if rx.recv_many(&mut batch, settings.batch_size).await == 0 {
                    break;
                }
                record_batch(&batch, rx.len());
                pending.push_back(batch);
            }
            if let Some(batch) = pending.front() {
                accountant.account_resilient(batch, &set_aside).await;
                pending.pop_front();
            }
        }
        set_aside.settle().await;
    })
    .await;
    if drained.is_err() {
        let lost = pending.iter().map(Vec::len).sum::<usize>() + rx.len() + set_aside.waiting();
        metrics::counter!("tollgate_usage_events_dropped_total", "reason" => "shutdown")
            .increment(lost as u64);
        // An upper bound: part of a batch cut off mid-way may have committed already.
        tracing::error!(
            at_most = lost,
            "usage queue not drained before the shutdown deadline: events lost"
        );
    } else {
        tracing::info!("usage queue drained");
    }
}

/// The next batch: what is queued (waiting for a first event), then what arrives
/// within the linger, up to the batch size. Empty when the queue is closed or `stop`
/// fires before a first event.
async fn next_batch(
    rx: &mut mpsc::Receiver<UsageEvent>,
    settings: &ListenerSettings,
    stop: &CancellationToken,
) -> Vec<UsageEvent> {
    let size = settings.batch_for(rx.len());
    let mut batch = Vec::with_capacity(size);
    tokio::select! {
        _ = rx.recv_many(&mut batch, size) => {}
        _ = stop.cancelled() => return batch,
    }
    if batch.is_empty() || settings.batch_linger.is_zero() {
        return batch;
    }
    let until = tokio::time::Instant::now() + settings.batch_linger;
    while batch.len() < size {
        let room = size - batch.len();
        tokio::select! {
            n = rx.recv_many(&mut batch, room) => if n == 0 { break },
            _ = tokio::time::sleep_until(until) => break,
            _ = stop.cancelled() => break,
        }
    }
    batch
}

/// The batch a finished accounting task hands back unaccounted (it was stopped).
fn handed_back(
    done: Result<Option<Vec<UsageEvent>>, tokio::task::JoinError>,
) -> Option<Vec<UsageEvent>> {
    // Tasks catch their own panics and are never aborted.
    done.unwrap_or_else(|e| {
        tracing::error!(error = %e, "usage accounting task ended abnormally");
        None
    })
}

fn record_batch(batch: &[UsageEvent], depth: usize) {
    metrics::histogram!("tollgate_usage_batch_size").record(batch.len() as f64);
    metrics::gauge!("tollgate_usage_queue_depth").set(depth as f64);
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
