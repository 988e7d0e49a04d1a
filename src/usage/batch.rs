//! One accounting batch in named stages, over one [`Batch`] value that carries what
//! each stage found to the next, inside one transaction (see [`account_batch`] for the
//! order and why it is that order).
//!
//! A stage reads what earlier stages put in the batch and adds its own part; nothing is
//! read from PostgreSQL twice. In steady state (snapshots remembered, no credit, no
//! threshold crossed) a batch runs seven statements whatever its size.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::announce::announce_standings;
use super::event::UsageEvent;
use super::grants::{
    Grant, allowance_of, ensure_free_subscriptions, ensure_snapshots, load_snapshots,
    load_subscriptions,
};
use super::key_blocks::record_keys;
use super::ledger_sql::{
    bump_counters, bump_daily, insert_ledger_rows, settle_reservations, spend,
};
use super::quota::QuotaView;
use super::report::load_credits;
use super::rules::{
    MarkerAction, Standing, Subscription, active_subscription, daily_marker_action, marker_action,
    standing_of,
};
use super::spending::{Credit, beyond_allowance, credits_at, spend_credits};
use super::thresholds::batch_events;
use crate::month::{Day, Month};
use crate::sync::lock;
use crate::throttle::Throttler;

/// What one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Ledger rows inserted.
    pub accounted: usize,
    /// Events whose transaction id was already in the ledger (or twice in the batch).
    pub duplicates: usize,
    /// Events for accounts that do not exist.
    pub unknown_account: usize,
    /// Events ignored because metering is off.
    pub ignored: usize,
    /// Accounts found with nothing remaining in the current month.
    pub exhausted: Vec<i64>,
    /// Where each account with calls accounted in the current month now stands.
    pub standings: Vec<Standing>,
    /// Accounts whose row lock was held elsewhere ([`Locks::SkipBusy`]): their events
    /// were left out of this batch, to be accounted later.
    pub busy: Vec<i64>,
}

/// How a batch takes its accounts' row locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locks {
    /// Wait for every lock, at most the accountant's lock timeout (then SQLSTATE 55P03).
    Wait,
    /// Take the locks that are free; account the other accounts' events, not these.
    SkipBusy,
}

/// Snapshots known to exist, by subscription and month, with their allowance once it
/// has been read. Rows of `monthly_usage` are never changed or deleted, so what was
/// seen stays true.
pub(super) type KnownSnapshots = Arc<Mutex<HashMap<(i64, Month), Option<i64>>>>;

/// Beyond this many remembered snapshots the memory starts over (months roll on).
const MAX_KNOWN_SNAPSHOTS: usize = 1_000_000;

/// What a batch takes from its accountant.
pub(super) struct Shared<'a> {
    pub free_monthly_calls: i64,
    pub throttler: &'a Throttler,
    pub quota: &'a QuotaView,
    /// `notify.thresholds`, ascending, when threshold webhooks are on.
    pub thresholds: Option<&'a [u8]>,
    pub known: &'a KnownSnapshots,
}

/// Remembers, once their batch committed, the snapshots it wrote (`grants`) and the
/// allowances it read (`loaded`).
fn remember(known: &KnownSnapshots, grants: &[Grant], loaded: HashMap<(i64, Month), i64>) {
    if grants.is_empty() && loaded.is_empty() {
        return;
    }
    let mut known = lock(known);
    if known.len() > MAX_KNOWN_SNAPSHOTS {
        known.clear();
    }
    for g in grants {
        known.entry((g.subscription_id, g.month)).or_insert(None);
    }
    known.extend(loaded.into_iter().map(|(k, a)| (k, Some(a))));
}

/// What one batch has found so far, stage by stage.
#[derive(Default)]
struct Batch<'e> {
    /// The instant the standings are judged at (taken once the locks are held).
    now: DateTime<Utc>,
    /// The accounts locked: those of the batch that exist and were not busy.
    locked: Vec<i64>,
    /// The locked accounts' events, each transaction id once.
    events: Vec<&'e UsageEvent>,
    /// Every subscription of the locked accounts.
    subs: HashMap<i64, Vec<Subscription>>,
    /// The subscription each event is accounted to.
    subscription_of: HashMap<Uuid, Option<i64>>,
    /// Snapshots written by this batch (remembered once it commits).
    new_grants: Vec<Grant>,
    /// The events whose ledger row this batch inserted.
    accounted: Vec<&'e UsageEvent>,
    /// Units added per account and month, and `used` after them.
    per_month: BTreeMap<(i64, Month), i64>,
    used: HashMap<(i64, Month), i64>,
    /// Units used per account and day after the batch.
    used_on: HashMap<(i64, Day), i64>,
    /// The subscription in force and its allowance, per account and month touched.
    active_in: BTreeMap<(i64, Month), (Subscription, i64)>,
    /// Allowances read from PostgreSQL (remembered once the batch commits).
    loaded: HashMap<(i64, Month), i64>,
    /// Top-up credit of the locked accounts, less what this batch spent.
    credits: HashMap<i64, Vec<Credit>>,
    /// Threshold events written to the outbox.
    recorded: u64,
    outcome: BatchOutcome,
}

impl Batch<'_> {
    /// The instant `month` is judged at: now for the current month, else its end.
    fn judged_at(&self, month: Month) -> DateTime<Utc> {
        if month == Month::containing(self.now) {
            self.now
        } else {
            month.judged_at(self.now)
        }
    }

    fn allowance_in(&self, account_id: i64, month: Month) -> Option<i64> {
        self.active_in.get(&(account_id, month)).map(|(_, a)| *a)
    }
}

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
        count(&mut tx, &mut batch).await?;
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

/// Reads the accounts' subscriptions (giving a free one to accounts older than
/// subscription tracking), picks each event's subscription, and writes the months'
/// snapshots this process has not seen yet.
async fn ensure_grants(
    tx: &mut PgConnection,
    acc: &Shared<'_>,
    batch: &mut Batch<'_>,
) -> Result<(), sqlx::Error> {
    let mut subs = load_subscriptions(tx, &batch.locked).await?;
    let without_free: Vec<i64> = batch
        .locked
        .iter()
        .copied()
        .filter(|a| {
            !subs
                .get(a)
                .is_some_and(|l| l.iter().any(Subscription::is_free))
        })
        .collect();
    if !without_free.is_empty() {
        ensure_free_subscriptions(tx, &without_free, acc.free_monthly_calls).await?;
        subs.extend(load_subscriptions(tx, &without_free).await?);
    }
    let free_calls = acc.free_monthly_calls;
    let mut grants: BTreeMap<(i64, Month), Grant> = BTreeMap::new();
    let mut subscription_of = HashMap::with_capacity(batch.events.len());
    for e in &batch.events {
        let month = Month::containing(e.occurred_at);
        let list = subs
            .get(&e.account_id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if let Some(free) = list.iter().find(|s| s.is_free()) {
            grants
                .entry((free.id, month))
                .or_insert_with(|| Grant::for_month(free, month, free_calls));
        }
        let active = active_subscription(list, e.occurred_at);
        if let Some(active) = active {
            grants
                .entry((active.id, month))
                .or_insert_with(|| Grant::for_month(active, month, free_calls));
        }
        subscription_of.insert(e.transaction_id, active.map(|s| s.id));
    }
    batch.new_grants = {
        let known = lock(acc.known);
        grants
            .into_values()
            .filter(|g| !known.contains_key(&(g.subscription_id, g.month)))
            .collect()
    };
    ensure_snapshots(tx, &batch.new_grants).await?;
    batch.subs = subs;
    batch.subscription_of = subscription_of;
    Ok(())
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

/// Adds the inserted rows to the monthly and daily counters, once per account and
/// window, and per key, and settles the units of hard plans and limited keys that
/// replicas had reserved for them.
async fn count(tx: &mut PgConnection, batch: &mut Batch<'_>) -> Result<(), sqlx::Error> {
    let mut per_day: BTreeMap<(i64, Day), (i64, i64)> = BTreeMap::new();
    let mut reserved: BTreeMap<(i64, Day, Uuid), i64> = BTreeMap::new();
    for e in &batch.accounted {
        let (month, day) = (
            Month::containing(e.occurred_at),
            Day::containing(e.occurred_at),
        );
        *batch.per_month.entry((e.account_id, month)).or_default() += e.cost;
        let figures = per_day.entry((e.account_id, day)).or_default();
        figures.0 += 1;
        figures.1 += e.cost;
        if let Some(replica) = e.reserved_by {
            *reserved.entry((e.account_id, day, replica)).or_default() += e.cost;
        }
    }
    batch.used = bump_counters(tx, &batch.per_month).await?;
    batch.used_on = bump_daily(tx, &per_day).await?;
    settle_reservations(tx, &reserved).await?;
    record_keys(tx, &batch.accounted).await
}

/// The subscription in force and its allowance for every account and month the batch
/// counted: remembered snapshots first, the others read once.
async fn read_allowances(
    tx: &mut PgConnection,
    acc: &Shared<'_>,
    batch: &mut Batch<'_>,
) -> Result<(), sqlx::Error> {
    let active: Vec<((i64, Month), Subscription)> = batch
        .per_month
        .keys()
        .filter_map(|&(a, m)| {
            let sub = active_subscription(batch.subs.get(&a)?, batch.judged_at(m))?;
            Some(((a, m), sub.clone()))
        })
        .collect();
    let mut snapshots: HashMap<(i64, Month), i64> = HashMap::new();
    let mut missing = Vec::new();
    {
        let known = lock(acc.known);
        for ((_, month), sub) in &active {
            match known.get(&(sub.id, *month)) {
                Some(Some(allowance)) => {
                    snapshots.insert((sub.id, *month), *allowance);
                }
                _ => missing.push((sub.id, *month)),
            }
        }
    }
    batch.loaded = load_snapshots(tx, &missing).await?;
    snapshots.extend(&batch.loaded);
    batch.active_in = active
        .into_iter()
        .map(|((a, m), sub)| {
            let allowance = allowance_of(&sub, m, &snapshots, acc.free_monthly_calls);
            ((a, m), (sub, allowance))
        })
        .collect();
    Ok(())
}

/// Pays the units the batch took past each month's allowance from top-up credit,
/// earliest expiry first.
async fn pay_from_credit(tx: &mut PgConnection, batch: &mut Batch<'_>) -> Result<(), sqlx::Error> {
    batch.credits = load_credits(tx, &batch.locked).await?;
    let mut spent: Vec<(i64, i64)> = Vec::new();
    let mut paid_in: Vec<(i64, DateTime<Utc>, i64)> = Vec::new();
    for (&(account_id, month), &added) in &batch.per_month {
        let Some(allowance) = batch.allowance_in(account_id, month) else {
            continue;
        };
        let at = batch.judged_at(month);
        let Some(list) = batch.credits.get_mut(&account_id) else {
            continue;
        };
        let after = batch
            .used
            .get(&(account_id, month))
            .copied()
            .unwrap_or(added);
        let beyond = beyond_allowance(allowance, after - added, after);
        for (id, take) in spend_credits(list, beyond, at) {
            if let Some(c) = list.iter_mut().find(|c| c.id == id) {
                c.remaining -= take;
            }
            spent.push((id, take));
            paid_in.push((account_id, month.start(), take));
        }
    }
    spend(tx, &spent).await?;
    super::credits_spent::record(tx, &paid_in).await
}

/// Writes the webhook events of the thresholds this batch crossed (with webhooks on):
/// they go out with the batch, or not at all.
async fn record_thresholds(
    tx: &mut PgConnection,
    acc: &Shared<'_>,
    batch: &mut Batch<'_>,
) -> Result<(), sqlx::Error> {
    let Some(thresholds) = acc.thresholds else {
        return Ok(());
    };
    let allowance_in = |a, m| batch.allowance_in(a, m);
    let events = batch_events(
        thresholds,
        &batch.per_month,
        &batch.used,
        allowance_in,
        &batch.accounted,
    );
    batch.recorded = crate::notify::outbox::record(tx, &events).await?;
    Ok(())
}

/// Where each account counted this month stands now, and what its markers become. The
/// markers are handed to the throttler while the account locks are held: an upgrade
/// that commits after us queues its restore behind this exhaust on the same worker, so
/// this replica never leaves a marker on an account that has allowance again.
fn judge_markers(acc: &Shared<'_>, batch: &mut Batch<'_>) {
    let (now, current, today) = (
        batch.now,
        Month::containing(batch.now),
        Day::containing(batch.now),
    );
    let mut restored = Vec::new();
    let mut day_exhausted = Vec::new();
    let mut day_restored = Vec::new();
    for (&(account_id, month), (sub, allowance)) in &batch.active_in {
        if month != current {
            continue;
        }
        let standing = standing_of(
            sub,
            *allowance,
            batch.used.get(&(account_id, current)).copied().unwrap_or(0),
            batch
                .credits
                .get(&account_id)
                .map_or(0, |l| credits_at(l, now)),
            batch
                .used_on
                .get(&(account_id, today))
                .copied()
                .unwrap_or(0),
        );
        // A marker this replica holds for an account with allowance again (e.g.
        // written by another replica just after an upgrade) is healed here.
        match marker_action(&standing, acc.throttler.is_marked(account_id, now)) {
            MarkerAction::Exhaust => batch.outcome.exhausted.push(account_id),
            MarkerAction::Restore => restored.push(account_id),
            MarkerAction::Keep => {}
        }
        if batch.used_on.contains_key(&(account_id, today)) {
            let marked = acc.throttler.is_marked_today(account_id, now);
            match daily_marker_action(&standing, marked) {
                MarkerAction::Exhaust => day_exhausted.push(account_id),
                MarkerAction::Restore => day_restored.push(account_id),
                MarkerAction::Keep => {}
            }
        }
        batch.outcome.standings.push(standing);
    }
    batch.outcome.standings.sort_by_key(|s| s.account_id);
    for &account_id in &batch.outcome.exhausted {
        acc.throttler.exhaust(account_id, current, now);
    }
    for account_id in restored {
        acc.throttler.restore(account_id, now);
    }
    for account_id in day_exhausted {
        acc.throttler.exhaust_day(account_id, today, now);
    }
    for account_id in day_restored {
        acc.throttler.restore_day(account_id, now);
    }
}

/// After the commit: the snapshots written or read are remembered, this replica's
/// quota view takes the standings, and the batch is counted.
fn committed(acc: &Shared<'_>, batch: Batch<'_>) -> BatchOutcome {
    remember(acc.known, &batch.new_grants, batch.loaded);
    let outcome = batch.outcome;
    if batch.events.is_empty() {
        return outcome;
    }
    acc.quota.observe(&outcome.standings, batch.now);
    let committed = Utc::now();
    for e in &batch.accounted {
        let lag = (committed - e.occurred_at).to_std().unwrap_or_default();
        metrics::histogram!("tollgate_usage_accounting_lag_seconds").record(lag.as_secs_f64());
    }
    metrics::counter!("tollgate_usage_events_accounted_total").increment(outcome.accounted as u64);
    metrics::counter!("tollgate_usage_events_duplicate_total").increment(outcome.duplicates as u64);
    if batch.recorded > 0 {
        metrics::counter!("tollgate_notify_events_recorded_total").increment(batch.recorded);
    }
    outcome
}
