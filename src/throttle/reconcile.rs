//! Reconciliation: make the store's markers for the current month agree with
//! PostgreSQL, the source of truth.
//!
//! The caller (which owns quota decisions) says which accounts are exhausted; this
//! lists the store once, writes the missing markers and deletes the ones of accounts
//! with allowance again, using Cloudflare's bulk endpoints when there are many, so a
//! run costs a handful of API calls whatever the number of accounts. What it changed is
//! recorded in the fleet's table (every replica follows at once), and the markers it
//! wrote are re-checked like any other write, in case an upgrade raced the run.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::core::Inner;
use super::fleet::MarkerKind;
use super::settle::{recheck, record};
use super::store::{StoreError, marker_expiration, marker_key, sending_at};
use crate::month::Month;

/// What one reconciliation did (the body of `POST /admin/v1/reconcile`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReconcileReport {
    pub accounts_checked: usize,
    pub markers_written: usize,
    pub markers_removed: usize,
}

pub(super) async fn run(
    inner: &Inner,
    exhausted: &HashSet<i64>,
    checked: &HashSet<i64>,
    now: DateTime<Utc>,
) -> Result<ReconcileReport, StoreError> {
    let month = Month::containing(now);
    let marked = inner.store.marked_accounts(month).await?;

    let mut to_write: Vec<i64> = exhausted.difference(&marked).copied().collect();
    let mut to_remove: Vec<i64> = marked.difference(exhausted).copied().collect();
    to_write.sort_unstable();
    to_remove.sort_unstable();

    let write_keys: Vec<String> = to_write.iter().map(|a| marker_key(*a, month)).collect();
    inner
        .store
        .put_many(&write_keys, marker_expiration(month, sending_at(now)))
        .await?;
    let remove_keys: Vec<String> = to_remove.iter().map(|a| marker_key(*a, month)).collect();
    inner.store.delete_many(&remove_keys).await?;

    // Recorded as this replica's own changes, so a lagging listing cannot undo them.
    for account_id in &to_write {
        inner.view.insert(*account_id, month);
    }
    for account_id in &to_remove {
        inner.view.remove(*account_id);
    }
    let period = month.start_unix();
    record(
        inner,
        MarkerKind::Month,
        period,
        &to_write,
        true,
        "reconcile",
    )
    .await;
    record(
        inner,
        MarkerKind::Month,
        period,
        &to_remove,
        false,
        "reconcile",
    )
    .await;
    recheck(inner, MarkerKind::Month, period, &to_write).await;
    inner
        .markers_written
        .fetch_add(to_write.len() as u64, Ordering::Relaxed);
    inner
        .markers_removed
        .fetch_add(to_remove.len() as u64, Ordering::Relaxed);
    metrics::counter!("tollgate_markers_written_total").increment(to_write.len() as u64);
    metrics::counter!("tollgate_markers_removed_total").increment(to_remove.len() as u64);

    let report = ReconcileReport {
        accounts_checked: checked.union(&marked).count(),
        markers_written: to_write.len(),
        markers_removed: to_remove.len(),
    };
    tracing::info!(
        accounts_checked = report.accounts_checked,
        markers_written = report.markers_written,
        markers_removed = report.markers_removed,
        "markers reconciled"
    );
    Ok(report)
}
