//! The in-process usage listener: takes queued events in batches (waiting a short
//! linger for a fuller one, growing with the backlog) and has up to
//! `concurrent_batches` of them accounted at once, each split by account into
//! `account_lanes` concurrent transactions, through the driver shared with the
//! JetStream consumer (`driver.rs`: retries, lanes, events set aside). Shutdown drains
//! what is queued and what is set aside within a bound.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use super::driver::ListenerSettings;
use super::driver::{SET_ASIDE_CAPACITY, SetAside, account_guarded, account_resilient};
use super::event::UsageEvent;
use super::ledger::Accountant;

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
            tokio::select! {
                _ = account_guarded(&accountant, &mut batch, lanes, &set_aside) => None,
                // Lanes that committed are accounted again by the drain: a no-op, since
                // ledger rows are idempotent and counters count inserted rows only.
                _ = stop.cancelled() => Some(batch),
            }
        });
    }
    while let Some(done) = in_flight.join_next().await {
        pending.extend(handed_back(done));
    }

    drain(&accountant, rx, pending, &set_aside, &settings).await;
}

/// On shutdown: accounts the batches handed back and what is still queued, within
/// `drain_timeout`; what is left then is counted and logged as lost.
async fn drain(
    accountant: &Accountant,
    mut rx: mpsc::Receiver<UsageEvent>,
    mut pending: VecDeque<Vec<UsageEvent>>,
    set_aside: &SetAside,
    settings: &ListenerSettings,
) {
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
                account_resilient(accountant, batch, set_aside).await;
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

/// How often a lingering batch looks for more events (at most; never past the linger).
const LINGER_POLL: Duration = Duration::from_millis(1);

/// The next batch: what is queued (waiting for a first event), then what arrives
/// within the linger, up to the batch size. Empty when the queue is closed or `stop`
/// fires before a first event.
///
/// While it lingers the listener looks at the queue on its own clock instead of
/// waiting on it: a waiting receiver is woken by every event sent, and each of those
/// wakes is a system call (and often a context switch) on the request's thread.
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
    let until = Instant::now() + settings.batch_linger;
    while take_queued(rx, &mut batch, size) {
        let now = Instant::now();
        if now >= until {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(until.min(now + LINGER_POLL)) => {}
            _ = stop.cancelled() => break,
        }
    }
    batch
}

/// Moves what is queued into `batch`, up to `size`, without waiting; whether the batch
/// still has room and more may come (the queue is open).
fn take_queued(
    rx: &mut mpsc::Receiver<UsageEvent>,
    batch: &mut Vec<UsageEvent>,
    size: usize,
) -> bool {
    while batch.len() < size {
        match rx.try_recv() {
            Ok(event) => batch.push(event),
            Err(mpsc::error::TryRecvError::Empty) => return true,
            Err(mpsc::error::TryRecvError::Disconnected) => return false,
        }
    }
    false
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
