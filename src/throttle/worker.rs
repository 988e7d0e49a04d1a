//! The throttler's background worker: the only place that talks to the marker store
//! on the request path's behalf.
//!
//! Every `refresh_interval` it ticks (see `listing.rs`: the lister's lease and, when due,
//! the fleet's KV listing), and it executes exhaust/restore commands. A failed write
//! leaves the view unmarked (fail open) and the account is retried on a later call, no
//! sooner than one refresh interval later.
//!
//! Every marker this process writes or removes in KV is recorded in `fleet_marker` right
//! after (a removal's tombstone right before), so the whole fleet honours it within a
//! second, and every marker it writes is re-checked against PostgreSQL (`settle.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::core::{Command, Inner};
use super::fleet::{MarkerKind, lease, table};
use super::settle::{failed, fleet_failed, fleet_holds, recheck, record, restore, restore_day};
use super::store::{
    StoreError, daily_marker_expiration, daily_marker_key, marker_expiration, marker_key,
    sending_at,
};
use crate::month::{Day, Month};
use crate::sync::lock;

pub(super) async fn run(
    inner: Arc<Inner>,
    mut rx: mpsc::Receiver<Command>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(inner.settings.refresh_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => super::listing::tick(&inner).await,
            command = rx.recv() => {
                let Some(first) = command else { break };
                // Take whatever else is waiting, so a burst of exhausts is one batch.
                let mut commands = vec![first];
                while commands.len() < MAX_COMMANDS_PER_ROUND {
                    match rx.try_recv() {
                        Ok(next) => commands.push(next),
                        Err(_) => break,
                    }
                }
                execute(&inner, commands).await;
            }
        }
        let (size, age) = inner.view.stats(Instant::now());
        metrics::gauge!("tollgate_marker_view_size").set(size as f64);
        if let Some(age) = age {
            metrics::gauge!("tollgate_marker_view_age_seconds").set(age.as_secs_f64());
        }
    }
    // Hand the listing over at once rather than after the lease expires.
    if inner.lister.load(Ordering::Relaxed) {
        let release = lease::release(&inner.fleet.db, inner.fleet.process);
        match tokio::time::timeout(std::time::Duration::from_secs(2), release).await {
            Ok(Ok(())) => tracing::info!("lister lease released"),
            _ => tracing::warn!("lister lease not released; it expires on its own"),
        }
    }
}

/// Most commands taken from the queue in one round.
const MAX_COMMANDS_PER_ROUND: usize = 10_000;
/// Above this many exhausts in a round, one bulk write replaces the per-key read and
/// write, so a burst of exhaustions stays within the call budget.
const BATCH_THRESHOLD: usize = 10;

/// Runs commands in their order, exhausts that follow each other as one batch.
async fn execute(inner: &Inner, commands: Vec<Command>) {
    let mut exhausts: Vec<(i64, Month, chrono::DateTime<Utc>)> = Vec::new();
    for command in commands {
        match command {
            Command::Exhaust {
                account_id,
                month,
                now,
            } => exhausts.push((account_id, month, now)),
            Command::Restore { account_id, month } => {
                exhaust_all(inner, std::mem::take(&mut exhausts)).await;
                restore(inner, account_id, month).await;
            }
            Command::ExhaustDay {
                account_id,
                day,
                now,
            } => exhaust_day(inner, account_id, day, now).await,
            Command::RestoreDay { account_id, day } => restore_day(inner, account_id, day).await,
        }
    }
    exhaust_all(inner, exhausts).await;
}

async fn exhaust_all(inner: &Inner, exhausts: Vec<(i64, Month, chrono::DateTime<Utc>)>) {
    if exhausts.len() <= BATCH_THRESHOLD {
        for (account_id, month, now) in exhausts {
            exhaust(inner, account_id, month, now).await;
        }
        return;
    }
    let now = exhausts.iter().map(|e| e.2).max().unwrap_or_else(Utc::now);
    let month = Month::containing(now);
    let accounts: Vec<i64> = exhausts
        .iter()
        .filter(|e| e.1 == month)
        .map(|e| e.0)
        .collect();
    // The fleet's table says which markers exist: no listing, which is the lister's job.
    let marked = table::marked_among(
        &inner.fleet.db,
        MarkerKind::Month,
        month.start_unix(),
        &accounts,
    )
    .await
    .unwrap_or_else(|e| {
        fleet_failed("read", &e);
        Default::default()
    });
    let missing: Vec<i64> = accounts
        .iter()
        .filter(|a| !marked.contains(a))
        .copied()
        .collect();
    let keys: Vec<String> = missing.iter().map(|a| marker_key(*a, month)).collect();
    let result = inner
        .store
        .put_many(&keys, marker_expiration(month, sending_at(now)))
        .await
        .map(|()| keys.len());
    let written = result.is_ok();
    settle_exhausts(inner, &accounts, month, result);
    if written {
        record(
            inner,
            MarkerKind::Month,
            month.start_unix(),
            &missing,
            true,
            "exhaust",
        )
        .await;
        recheck(inner, MarkerKind::Month, month.start_unix(), &missing).await;
    }
    let mut pending = lock(&inner.pending);
    for (account_id, _, _) in &exhausts {
        pending.remove(account_id);
    }
}

/// Records the outcome of marking `accounts`: on success the view knows them and
/// `written` markers are counted; on failure they wait one refresh interval before a
/// later call retries, and the store failure is counted as a fail-open.
fn settle_exhausts(
    inner: &Inner,
    accounts: &[i64],
    month: Month,
    result: Result<usize, StoreError>,
) {
    match result {
        Ok(written) => {
            let mut retry_at = lock(&inner.retry_at);
            for account_id in accounts {
                inner.view.insert(*account_id, month);
                retry_at.remove(account_id);
            }
            drop(retry_at);
            if written > 0 {
                inner
                    .markers_written
                    .fetch_add(written as u64, Ordering::Relaxed);
                metrics::counter!("tollgate_markers_written_total").increment(written as u64);
                tracing::info!(?accounts, written, "exhaustion markers written");
            }
        }
        Err(e) => {
            let retry = Instant::now() + inner.settings.refresh_interval;
            let mut retry_at = lock(&inner.retry_at);
            for account_id in accounts {
                retry_at.insert(*account_id, retry);
            }
            drop(retry_at);
            failed(inner, "exhaust", &e);
        }
    }
}

async fn exhaust_day(inner: &Inner, account_id: i64, day: Day, now: chrono::DateTime<Utc>) {
    let key = daily_marker_key(account_id, day);
    if fleet_holds(inner, MarkerKind::Day, day.start_unix(), account_id).await {
        inner.view.insert_day(account_id, day);
        return;
    }
    let result = async {
        if !inner.store.exists(&key).await? {
            inner
                .store
                .put(&key, daily_marker_expiration(day, sending_at(now)))
                .await?;
        }
        Ok::<_, StoreError>(())
    }
    .await;
    match result {
        Ok(()) => {
            inner.view.insert_day(account_id, day);
            tracing::info!(account_id, key, "daily exhaustion marker written");
            record(
                inner,
                MarkerKind::Day,
                day.start_unix(),
                &[account_id],
                true,
                "exhaust",
            )
            .await;
            recheck(inner, MarkerKind::Day, day.start_unix(), &[account_id]).await;
        }
        Err(e) => failed(inner, "exhaust_day", &e),
    }
}

async fn exhaust(inner: &Inner, account_id: i64, month: Month, now: chrono::DateTime<Utc>) {
    let period = month.start_unix();
    if fleet_holds(inner, MarkerKind::Month, period, account_id).await {
        settle_exhausts(inner, &[account_id], month, Ok(0));
        lock(&inner.pending).remove(&account_id);
        return;
    }
    let key = marker_key(account_id, month);
    let result = async {
        if inner.store.exists(&key).await? {
            return Ok(false);
        }
        inner
            .store
            .put(&key, marker_expiration(month, sending_at(now)))
            .await?;
        Ok::<_, StoreError>(true)
    }
    .await;
    let stored = result.is_ok();
    settle_exhausts(inner, &[account_id], month, result.map(usize::from));
    lock(&inner.pending).remove(&account_id);
    if stored {
        record(
            inner,
            MarkerKind::Month,
            period,
            &[account_id],
            true,
            "exhaust",
        )
        .await;
        recheck(inner, MarkerKind::Month, period, &[account_id]).await;
    }
}
