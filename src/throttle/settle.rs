//! Settling a marker with the fleet after a KV call: recording it in `fleet_marker`, and
//! re-checking against PostgreSQL that a marker just written is still called for.
//!
//! **Exhaustion racing a restore.** Replica A decides an account is exhausted; meanwhile
//! replica B commits an upgrade and deletes the marker; A's write then lands after B's
//! delete and would leave a stale marker (until the hourly reconciliation). So whoever
//! writes a marker asks PostgreSQL afterwards whether the account's standing still calls
//! for it ([`recheck`]), and removes it when not. This settles every interleaving: B's
//! restore (tombstone, then KV delete) follows B's commit; if A's write lands before B's
//! delete, B's delete removes it; if after, A's re-check starts after A's write, hence
//! after B's commit, sees the allowance and removes the marker itself. A re-check that
//! cannot reach PostgreSQL is retried at every tick until it can.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use chrono::Utc;

use super::core::Inner;
use super::fleet::{MarkerKind, table};
use super::store::{StoreError, daily_marker_key, marker_key};
use crate::error::anyhow_chain;
use crate::month::{Day, Month};
use crate::sync::lock;

/// A `fleet_marker` read or write failed: the KV side stands, the other replicas learn
/// of it at the next listing instead of at once.
pub(super) fn fleet_failed(op: &'static str, err: &sqlx::Error) {
    metrics::counter!("tollgate_fleet_marker_errors_total", "op" => op).increment(1);
    tracing::warn!(op, error = %err, "fleet marker table unavailable");
}

/// Records markers this process just wrote or removed in the fleet's table.
pub(super) async fn record(
    inner: &Inner,
    kind: MarkerKind,
    period_start_unix: i64,
    accounts: &[i64],
    marked: bool,
    by: &str,
) {
    let written = table::set(
        &inner.fleet.db,
        kind,
        period_start_unix,
        accounts,
        marked,
        by,
    );
    if let Err(e) = written.await {
        fleet_failed("write", &e);
    }
}

/// Whether the fleet's table already holds the marker (then KV needs no call).
pub(super) async fn fleet_holds(
    inner: &Inner,
    kind: MarkerKind,
    period_start_unix: i64,
    account_id: i64,
) -> bool {
    match table::is_marked(&inner.fleet.db, kind, period_start_unix, account_id).await {
        Ok(marked) => marked,
        Err(e) => {
            fleet_failed("read", &e);
            false
        }
    }
}

/// Asks PostgreSQL whether the markers just written for `accounts` are still called for,
/// and removes those that are not (see the module's note on races).
pub(super) async fn recheck(
    inner: &Inner,
    kind: MarkerKind,
    period_start_unix: i64,
    accounts: &[i64],
) {
    let Some(check) = &inner.fleet.check else {
        return;
    };
    if accounts.is_empty() {
        return;
    }
    let wanted = match check.wanted(accounts, Utc::now()).await {
        Ok(wanted) => wanted,
        Err(e) => {
            tracing::warn!(error = %anyhow_chain(&*e), "markers written but not re-checked; retrying");
            let mut rechecks = lock(&inner.rechecks);
            rechecks.extend(accounts.iter().map(|a| (kind, period_start_unix, *a)));
            return;
        }
    };
    let now = Utc::now();
    for &account_id in accounts {
        let still = match kind {
            MarkerKind::Month => wanted.month.contains(&account_id),
            MarkerKind::Day => wanted.day.contains(&account_id),
        };
        if still {
            continue;
        }
        metrics::counter!("tollgate_marker_race_removals_total", "kind" => kind.as_str())
            .increment(1);
        tracing::info!(
            account_id,
            kind = kind.as_str(),
            "marker written for an account PostgreSQL no longer calls exhausted; removing it"
        );
        match kind {
            MarkerKind::Month if Month::containing(now).start_unix() == period_start_unix => {
                inner.view.remove(account_id);
                restore(inner, account_id, Month::containing(now)).await;
            }
            MarkerKind::Day if Day::containing(now).start_unix() == period_start_unix => {
                inner.view.remove_day(account_id);
                restore_day(inner, account_id, Day::containing(now)).await;
            }
            // The period is over: its marker expires with it.
            _ => {}
        }
    }
}

/// Re-checks the markers whose re-check failed before.
pub(super) async fn retry_rechecks(inner: &Inner) {
    let pending: Vec<(MarkerKind, i64, i64)> = lock(&inner.rechecks).drain().collect();
    for kind in [MarkerKind::Month, MarkerKind::Day] {
        let mut by_period: HashMap<i64, Vec<i64>> = HashMap::new();
        for (k, period, account) in &pending {
            if *k == kind {
                by_period.entry(*period).or_default().push(*account);
            }
        }
        for (period, accounts) in by_period {
            recheck(inner, kind, period, &accounts).await;
        }
    }
}

/// A marker store call failed: the view stays as it was (fail open), counted and logged
/// at most once per interval.
pub(super) fn failed(inner: &Inner, op: &'static str, err: &StoreError) {
    inner.fail_open.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("tollgate_throttle_fail_open_total", "reason" => err.reason()).increment(1);
    if inner.fail_open_log.allow() {
        tracing::warn!(op, reason = err.reason(), error = %anyhow_chain(err),
            suppressed = inner.fail_open_log.take_suppressed(),
            "marker store unavailable; failing open");
    }
}

/// Removes the marker: the fleet's table first (the account has units again, whatever
/// KV answers), then KV.
pub(super) async fn restore(inner: &Inner, account_id: i64, month: Month) {
    record(
        inner,
        MarkerKind::Month,
        month.start_unix(),
        &[account_id],
        false,
        "restore",
    )
    .await;
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

pub(super) async fn restore_day(inner: &Inner, account_id: i64, day: Day) {
    record(
        inner,
        MarkerKind::Day,
        day.start_unix(),
        &[account_id],
        false,
        "restore",
    )
    .await;
    let key = daily_marker_key(account_id, day);
    match inner.store.delete(&key).await {
        Ok(()) => inner.view.remove_day(account_id),
        Err(e) => failed(inner, "restore_day", &e),
    }
}
