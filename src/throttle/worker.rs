//! The throttler's background worker: the only place that talks to the marker store
//! on the request path's behalf.
//!
//! It refreshes the view every `refresh_interval` by listing the marker prefix, and
//! executes exhaust/restore commands. A failed write leaves the view unmarked (fail
//! open) and the account is retried on a later call, no sooner than one refresh
//! interval later.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::store::{StoreError, marker_key, parse_marker_key};
use super::{Command, Inner, lock};
use crate::error::anyhow_chain;
use crate::month::Month;

/// KV refuses expirations less than 60 s away.
const MIN_EXPIRATION_SECS: i64 = 60;

/// `expiration = max(month_end, now + 60)`, in unix seconds. `now` is the later of the
/// instant given and the clock when sending, rounded up, so KV never sees an
/// expiration less than 60 s away.
pub fn marker_expiration(month: Month, now: chrono::DateTime<Utc>) -> i64 {
    let now = now.max(Utc::now());
    let now_secs = now.timestamp() + i64::from(now.timestamp_subsec_nanos() > 0);
    month.end().timestamp().max(now_secs + MIN_EXPIRATION_SECS)
}

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
            _ = tick.tick() => refresh(&inner).await,
            command = rx.recv() => match command {
                Some(Command::Exhaust { account_id, month, now }) => exhaust(&inner, account_id, month, now).await,
                Some(Command::Restore { account_id, month }) => restore(&inner, account_id, month).await,
                Some(Command::Refresh) => refresh(&inner).await,
                None => break,
            },
        }
        let (size, age) = inner.view.stats(Instant::now());
        metrics::gauge!("tollgate_marker_view_size").set(size as f64);
        if let Some(age) = age {
            metrics::gauge!("tollgate_marker_view_age_seconds").set(age.as_secs_f64());
        }
    }
}

fn failed(inner: &Inner, op: &'static str, err: &StoreError) {
    inner.fail_open.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("tollgate_throttle_fail_open_total", "reason" => err.reason()).increment(1);
    if inner.fail_open_log.allow() {
        tracing::warn!(op, reason = err.reason(), error = %anyhow_chain(err),
            suppressed = inner.fail_open_log.take_suppressed(),
            "marker store unavailable; failing open");
    }
}

async fn refresh(inner: &Inner) {
    let month = Month::containing(Utc::now());
    let started = Instant::now();
    match inner.store.list().await {
        Ok(keys) => {
            let accounts: HashSet<i64> = keys
                .iter()
                .filter_map(|k| parse_marker_key(k, month))
                .collect();
            inner.view.replace(month, accounts, started);
        }
        Err(e) => failed(inner, "refresh", &e),
    }
}

async fn exhaust(inner: &Inner, account_id: i64, month: Month, now: chrono::DateTime<Utc>) {
    let key = marker_key(account_id, month);
    let result = async {
        if inner.store.exists(&key).await? {
            return Ok(false);
        }
        inner.store.put(&key, marker_expiration(month, now)).await?;
        Ok::<_, StoreError>(true)
    }
    .await;
    match result {
        Ok(written) => {
            inner.view.insert(account_id, month);
            lock(&inner.retry_at).remove(&account_id);
            if written {
                inner.markers_written.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("tollgate_markers_written_total").increment(1);
                tracing::info!(account_id, key, "exhaustion marker written");
            }
        }
        Err(e) => {
            lock(&inner.retry_at)
                .insert(account_id, Instant::now() + inner.settings.refresh_interval);
            failed(inner, "exhaust", &e);
        }
    }
    lock(&inner.pending).remove(&account_id);
}

async fn restore(inner: &Inner, account_id: i64, month: Month) {
    let key = marker_key(account_id, month);
    match inner.store.delete(&key).await {
        Ok(()) => {
            inner.view.remove(account_id);
            inner.markers_removed.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("tollgate_markers_removed_total").increment(1);
            tracing::info!(account_id, key, "exhaustion marker removed");
        }
        Err(e) => failed(inner, "restore", &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> chrono::DateTime<Utc> {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .with_timezone(&Utc)
    }

    // Months far ahead, so the clock of the machine running the tests never
    // overtakes the instants given.
    #[test]
    fn markers_expire_at_the_month_end() {
        let nov: Month = "2099-11".parse().unwrap();
        assert_eq!(
            marker_expiration(nov, at("2099-11-15T00:00:00Z")),
            nov.end().timestamp()
        );
    }

    #[test]
    fn in_the_last_minute_of_a_month_markers_live_sixty_seconds() {
        let nov: Month = "2099-11".parse().unwrap();
        let now = at("2099-11-30T23:59:30Z");
        assert_eq!(marker_expiration(nov, now), now.timestamp() + 60);
        let fraction = at("2099-11-30T23:59:30.2Z");
        assert_eq!(marker_expiration(nov, fraction), now.timestamp() + 61);
    }

    #[test]
    fn a_marker_is_never_sent_with_less_than_sixty_seconds_left() {
        let month = Month::containing(Utc::now());
        let stale = Utc::now() - chrono::Duration::hours(1);
        assert!(marker_expiration(month, stale) >= Utc::now().timestamp() + 60);
    }
}
