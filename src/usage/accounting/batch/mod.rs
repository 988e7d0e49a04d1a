//! One accounting batch in named stages, over one [`Batch`] value that carries what
//! each stage found to the next, inside one transaction (see [`account_batch`] for the
//! order and why it is that order).
//!
//! A stage reads what earlier stages put in the batch and adds its own part; nothing is
//! read from PostgreSQL twice. In steady state (snapshots remembered, no credit, no
//! threshold crossed) a batch runs seven statements whatever its size.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

mod snapshots;
mod standings;
mod value;

use super::counters::{MonthFigures, bump_usage};
use super::event::UsageEvent;
use super::key_counters::settle_key_reservations;
use super::ledger_sql::{insert_ledger_rows, settle_reservations};
use crate::month::{Day, Month};
use crate::usage::announce::announce_standings;
use snapshots::{ensure_grants, read_allowances, remember};
use standings::{judge_markers, pay_from_credit, record_thresholds};
use value::Batch;
pub use value::{BatchOutcome, Locks};
pub(super) use value::{KnownSnapshots, Shared};

/// Accounts `events` in one transaction, stage by stage. The order matters: the locks
/// come first, so the instant taken after them sees every subscription committed
/// before; grants before rows, since a row names its subscription; counters from the
/// rows inserted only; credit pays what the counters took past the allowance;
/// thresholds and markers judge the figures after both; the announcement travels with
/// the commit.
pub(super) async fn account_batch(
    acc: &Shared<'_>,
    mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
    events: &[UsageEvent],
    now: Option<DateTime<Utc>>,
    locks: Locks,
) -> Result<BatchOutcome, sqlx::Error> {
    let mut batch = lock_accounts(&mut tx, events, now, locks).await?;
    if !batch.events.is_empty() {
        ensure_grants(&mut tx, acc, &mut batch).await?;
        insert_rows(&mut tx, &mut batch).await?;
        count(&mut tx, acc, &mut batch).await?;
        read_allowances(&mut tx, acc, &mut batch).await?;
        pay_from_credit(&mut tx, &mut batch).await?;
        record_thresholds(&mut tx, acc, &mut batch).await?;
        judge_markers(acc, &mut batch);
        announce_standings(&mut tx, acc.quota.replica(), &batch.outcome.standings).await?;
    }
    tx.commit().await?;
    Ok(committed(acc, batch))
}

/// Locks the batch's accounts (in id order, as every writer does) and keeps the events
/// of those locked, each transaction id once; events of accounts that do not exist are
/// counted and dropped, those of busy accounts ([`Locks::SkipBusy`]) left out.
async fn lock_accounts<'e>(
    tx: &mut PgConnection,
    events: &'e [UsageEvent],
    now: Option<DateTime<Utc>>,
    locks: Locks,
) -> Result<Batch<'e>, sqlx::Error> {
    let mut seen = HashSet::with_capacity(events.len());
    let unique: Vec<&UsageEvent> = events
        .iter()
        .filter(|e| seen.insert(e.transaction_id))
        .collect();
    let mut outcome = BatchOutcome {
        duplicates: events.len() - unique.len(),
        ..Default::default()
    };
    let account_ids: Vec<i64> = unique
        .iter()
        .map(|e| e.account_id)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let skip_busy = locks == Locks::SkipBusy;
    let locked = crate::db::lock_accounts(tx, &account_ids, skip_busy).await?;
    if skip_busy && locked.len() < account_ids.len() {
        let skipped: Vec<i64> = account_ids
            .iter()
            .copied()
            .filter(|id| locked.binary_search(id).is_err())
            .collect();
        outcome.busy = sqlx::query_scalar("SELECT id FROM account WHERE id = ANY($1)")
            .bind(&skipped)
            .fetch_all(&mut *tx)
            .await?;
    }
    let busy: HashSet<i64> = outcome.busy.iter().copied().collect();
    let (known, unknown): (Vec<&UsageEvent>, Vec<&UsageEvent>) = unique
        .into_iter()
        .filter(|e| !busy.contains(&e.account_id))
        .partition(|e| locked.binary_search(&e.account_id).is_ok());
    outcome.unknown_account = unknown.len();
    for e in &unknown {
        tracing::warn!(account_id = e.account_id, transaction_id = %e.transaction_id,
            "usage event for an unknown account ignored");
    }
    Ok(Batch {
        now: now.unwrap_or_else(Utc::now),
        locked,
        events: known,
        outcome,
        ..Default::default()
    })
}

/// Inserts the ledger rows, each at most once: an event already in the ledger is a
/// duplicate, accounted nowhere.
async fn insert_rows(tx: &mut PgConnection, batch: &mut Batch<'_>) -> Result<(), sqlx::Error> {
    let inserted = insert_ledger_rows(tx, &batch.events, &batch.subscription_of).await?;
    batch.outcome.accounted = inserted.len();
    batch.outcome.duplicates += batch.events.len() - inserted.len();
    batch.accounted = batch
        .events
        .iter()
        .copied()
        .filter(|e| inserted.contains(&e.transaction_id))
        .collect();
    Ok(())
}

/// Adds the inserted rows to the account counters (the month and its days), once per
/// account and month, and to the rollup per key, day and route (which also holds each
/// key's month, SPEC §13), and settles the units of hard plans and limited keys that
/// replicas had reserved for them.
async fn count(
    tx: &mut PgConnection,
    acc: &Shared<'_>,
    batch: &mut Batch<'_>,
) -> Result<(), sqlx::Error> {
    let mut figures: BTreeMap<(i64, Month), MonthFigures> = BTreeMap::new();
    let mut reserved: BTreeMap<(i64, Day, Uuid), i64> = BTreeMap::new();
    for e in &batch.accounted {
        let (month, day) = (
            Month::containing(e.occurred_at),
            Day::containing(e.occurred_at),
        );
        let month_figures = figures.entry((e.account_id, month)).or_default();
        month_figures.units += e.cost;
        let day_figures = month_figures.days.entry(day).or_default();
        day_figures.0 += 1;
        day_figures.1 += e.cost;
        if let Some(replica) = e.reserved_by {
            *reserved.entry((e.account_id, day, replica)).or_default() += e.cost;
        }
    }
    batch.per_month = figures.iter().map(|(&k, f)| (k, f.units)).collect();
    let counted = bump_usage(tx, &figures).await?;
    (batch.used, batch.used_on) = (counted.used, counted.used_on);
    settle_reservations(tx, &reserved).await?;
    settle_key_reservations(tx, &batch.accounted).await?;
    batch.latencies =
        crate::usage::analytics::rollup::record(tx, &batch.accounted, acc.routes).await?;
    Ok(())
}

/// After the commit: the snapshots written or read are remembered, this replica's
/// quota view takes the standings, and the batch is counted.
fn committed(acc: &Shared<'_>, mut batch: Batch<'_>) -> BatchOutcome {
    remember(acc.known, &batch.new_grants, batch.loaded);
    acc.latencies.add(std::mem::take(&mut batch.latencies));
    let outcome = batch.outcome;
    if batch.events.is_empty() {
        return outcome;
    }
    acc.quota.observe(&outcome.standings, batch.now);
    let committed = Utc::now();
    // One lookup of the series per batch, not per event.
    let lags = metrics::histogram!("tollgate_usage_accounting_lag_seconds");
    for e in &batch.accounted {
        let lag = (committed - e.occurred_at).to_std().unwrap_or_default();
        lags.record(lag.as_secs_f64());
    }
    metrics::counter!("tollgate_usage_events_accounted_total").increment(outcome.accounted as u64);
    metrics::counter!("tollgate_usage_events_duplicate_total").increment(outcome.duplicates as u64);
    if batch.recorded > 0 {
        metrics::counter!("tollgate_notify_events_recorded_total").increment(batch.recorded);
    }
    outcome
}
