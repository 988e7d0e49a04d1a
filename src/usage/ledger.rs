//! The ledger: accounting one batch of usage events in one transaction.
//!
//! Lock the batch's accounts in id order (so replicas never deadlock), make sure every
//! account has its free subscription and the months' grants exist, insert the ledger
//! rows at most once, bump the per-month counters by exactly the rows inserted, and
//! find the accounts whose current month is used up. Grant snapshots never change once
//! written, so the allowances this replica has seen are kept in memory: in steady
//! state a batch costs four statements whatever its size. With threshold webhooks on,
//! a batch that crosses a threshold writes its events to the outbox in the same
//! transaction (one statement more, only then).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
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
use super::partitions::{Partitions, is_missing_partition};
use super::quota::QuotaView;
use super::report::load_credits;
use super::rules::{
    MarkerAction, Standing, Subscription, active_subscription, daily_marker_action, marker_action,
    standing_of,
};
use super::spending::{beyond_allowance, credits_at, spend_credits};
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

/// Default bound of a wait for an account's row lock.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(1);

/// Snapshots known to exist, by subscription and month, with their allowance once it
/// has been read. Rows of `monthly_usage` are never changed or deleted, so what was
/// seen stays true.
type KnownSnapshots = Arc<Mutex<HashMap<(i64, Month), Option<i64>>>>;

/// Beyond this many remembered snapshots the memory starts over (months roll on).
const MAX_KNOWN_SNAPSHOTS: usize = 1_000_000;

/// Accounts events. Cheap to clone; clones share what they know of snapshots.
#[derive(Clone)]
pub struct Accountant {
    db: PgPool,
    free_monthly_calls: i64,
    enabled: bool,
    throttler: Throttler,
    known: KnownSnapshots,
    lock_timeout: Duration,
    quota: QuotaView,
    partitions: Partitions,
    /// `notify.thresholds`, ascending, when threshold webhooks are on.
    thresholds: Option<Arc<[u8]>>,
}

impl Accountant {
    pub fn new(db: PgPool, free_monthly_calls: i64, enabled: bool, throttler: Throttler) -> Self {
        Self {
            partitions: Partitions::new(db.clone()),
            db,
            free_monthly_calls,
            enabled,
            throttler,
            known: Default::default(),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            quota: QuotaView::disabled(),
            thresholds: None,
        }
    }

    /// Records an outbox event for every one of `thresholds` (percentages of the
    /// month's allowance) an account crosses (SPEC §7).
    pub fn with_thresholds(mut self, thresholds: &[u8]) -> Self {
        let mut sorted = thresholds.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        self.thresholds = Some(sorted.into());
        self
    }

    /// Keeps this replica's quota view current with what it accounts, and tells the
    /// other replicas' views which accounts changed.
    pub fn with_quota(mut self, quota: QuotaView) -> Self {
        self.quota = quota;
        self
    }

    /// Bounds every wait for an account's row lock (`usage_check.lock_timeout_ms`).
    pub fn with_lock_timeout(mut self, lock_timeout: Duration) -> Self {
        self.lock_timeout = lock_timeout.max(Duration::from_millis(1));
        self
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<(i64, Month), Option<i64>>> {
        lock(&self.known)
    }

    /// Accounts `events` in one transaction; `now` decides the current month.
    pub async fn account(
        &self,
        events: &[UsageEvent],
        now: DateTime<Utc>,
    ) -> Result<BatchOutcome, sqlx::Error> {
        self.account_as_of(events, Some(now), Locks::Wait).await
    }

    /// Accounts `events` as of the moment their accounts are locked, so a subscription
    /// activated while the batch waited for those locks is already in force (an
    /// instant taken before the wait would still see the plan it replaced).
    pub async fn account_now(
        &self,
        events: &[UsageEvent],
        locks: Locks,
    ) -> Result<BatchOutcome, sqlx::Error> {
        self.account_as_of(events, None, locks).await
    }

    /// `now`: the instant the standings are judged at; `None` for when the locks are held.
    /// The ledger partitions of the events' months are made first when this process has
    /// not seen them yet, and once more should the insert still find one missing.
    #[tracing::instrument(skip_all, fields(events = events.len()))]
    async fn account_as_of(
        &self,
        events: &[UsageEvent],
        now: Option<DateTime<Utc>>,
        locks: Locks,
    ) -> Result<BatchOutcome, sqlx::Error> {
        if !self.enabled {
            return self.account_batch(events, now, locks).await;
        }
        let months = || events.iter().map(|e| Month::containing(e.occurred_at));
        self.partitions.ensure(months()).await?;
        match self.account_batch(events, now, locks).await {
            Err(e) if is_missing_partition(&e) => {
                tracing::warn!("a ledger partition went missing; making it again");
                self.partitions.forget(months());
                self.partitions.ensure(months()).await?;
                self.account_batch(events, now, locks).await
            }
            outcome => outcome,
        }
    }

    async fn account_batch(
        &self,
        events: &[UsageEvent],
        now: Option<DateTime<Utc>>,
        locks: Locks,
    ) -> Result<BatchOutcome, sqlx::Error> {
        if !self.enabled {
            return Ok(BatchOutcome {
                ignored: events.len(),
                ..Default::default()
            });
        }
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

        // A lock held elsewhere (a long transaction, a stuck session) must not stall
        // accounting: the wait is bounded, and past it the caller skips the busy rows.
        // The bound travels with BEGIN, in the same round trip.
        let mut tx = self
            .db
            .begin_with(format!(
                "BEGIN; SET LOCAL lock_timeout = '{}ms'",
                self.lock_timeout.as_millis()
            ))
            .await?;
        let lock_sql = match locks {
            Locks::Wait => "SELECT id FROM account WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            Locks::SkipBusy => {
                "SELECT id FROM account WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED"
            }
        };
        let locked: Vec<i64> = sqlx::query_scalar(lock_sql)
            .bind(&account_ids)
            .fetch_all(&mut *tx)
            .await?;
        if locks == Locks::SkipBusy && locked.len() < account_ids.len() {
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
        let now = now.unwrap_or_else(Utc::now);
        let locked_set: HashSet<i64> = locked.iter().copied().collect();
        let busy: HashSet<i64> = outcome.busy.iter().copied().collect();
        let (known, unknown): (Vec<&UsageEvent>, Vec<&UsageEvent>) = unique
            .into_iter()
            .filter(|e| !busy.contains(&e.account_id))
            .partition(|e| locked_set.contains(&e.account_id));
        outcome.unknown_account = unknown.len();
        for e in &unknown {
            tracing::warn!(account_id = e.account_id, transaction_id = %e.transaction_id,
                "usage event for an unknown account ignored");
        }
        if known.is_empty() {
            tx.commit().await?;
            return Ok(outcome);
        }

        let mut subs = load_subscriptions(&mut tx, &locked).await?;
        let without_free: Vec<i64> = locked
            .iter()
            .copied()
            .filter(|a| {
                !subs
                    .get(a)
                    .is_some_and(|l| l.iter().any(Subscription::is_free))
            })
            .collect();
        if !without_free.is_empty() {
            // Accounts older than subscription tracking get their free plan now.
            ensure_free_subscriptions(&mut tx, &without_free, self.free_monthly_calls).await?;
            subs.extend(load_subscriptions(&mut tx, &without_free).await?);
        }

        let current = Month::containing(now);
        let mut grants: BTreeMap<(i64, Month), Grant> = BTreeMap::new();
        let mut subscription_of: HashMap<Uuid, Option<i64>> = HashMap::with_capacity(known.len());
        for e in &known {
            let month = Month::containing(e.occurred_at);
            let list = subs
                .get(&e.account_id)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if let Some(free) = list.iter().find(|s| s.is_free()) {
                grants
                    .entry((free.id, month))
                    .or_insert_with(|| Grant::for_month(free, month, self.free_monthly_calls));
            }
            let active = active_subscription(list, e.occurred_at);
            if let Some(active) = active {
                grants
                    .entry((active.id, month))
                    .or_insert_with(|| Grant::for_month(active, month, self.free_monthly_calls));
            }
            subscription_of.insert(e.transaction_id, active.map(|s| s.id));
        }
        let unknown_grants: Vec<Grant> = {
            let known_snapshots = self.known();
            grants
                .into_values()
                .filter(|g| !known_snapshots.contains_key(&(g.subscription_id, g.month)))
                .collect()
        };
        ensure_snapshots(&mut tx, &unknown_grants).await?;

        let inserted = insert_ledger_rows(&mut tx, &known, &subscription_of).await?;
        outcome.accounted = inserted.len();
        outcome.duplicates += known.len() - inserted.len();

        let accounted: Vec<&UsageEvent> = known
            .iter()
            .copied()
            .filter(|e| inserted.contains(&e.transaction_id))
            .collect();
        let mut per_month: BTreeMap<(i64, Month), i64> = BTreeMap::new();
        let mut per_day: BTreeMap<(i64, Day), (i64, i64)> = BTreeMap::new();
        let mut reserved: BTreeMap<(i64, Day, Uuid), i64> = BTreeMap::new();
        for e in &accounted {
            *per_month
                .entry((e.account_id, Month::containing(e.occurred_at)))
                .or_default() += e.cost;
            let day = per_day
                .entry((e.account_id, Day::containing(e.occurred_at)))
                .or_default();
            day.0 += 1;
            day.1 += e.cost;
            if let Some(replica) = e.reserved_by {
                *reserved
                    .entry((e.account_id, Day::containing(e.occurred_at), replica))
                    .or_default() += e.cost;
            }
        }
        let used = bump_counters(&mut tx, &per_month).await?;
        let used_on = bump_daily(&mut tx, &per_day).await?;
        settle_reservations(&mut tx, &reserved).await?;
        record_keys(&mut tx, &accounted).await?;

        // The allowance of every (account, month) the batch touched, for credit and
        // standings: remembered snapshots first, the rest read once.
        let active_in: HashMap<(i64, Month), &Subscription> = per_month
            .keys()
            .filter_map(|(a, m)| {
                let at = if *m == current { now } else { m.judged_at(now) };
                Some(((*a, *m), active_subscription(subs.get(a)?, at)?))
            })
            .collect();
        let mut snapshots: HashMap<(i64, Month), i64> = HashMap::new();
        let mut missing = Vec::new();
        {
            let known_snapshots = self.known();
            for ((_, month), sub) in &active_in {
                match known_snapshots.get(&(sub.id, *month)) {
                    Some(Some(allowance)) => {
                        snapshots.insert((sub.id, *month), *allowance);
                    }
                    _ => missing.push((sub.id, *month)),
                }
            }
        }
        let loaded = load_snapshots(&mut tx, &missing).await?;
        snapshots.extend(&loaded);
        let allowance_in = |account_id: i64, month: Month| {
            active_in
                .get(&(account_id, month))
                .map(|sub| allowance_of(sub, month, &snapshots, self.free_monthly_calls))
        };

        // Units beyond the allowance are paid from credit, earliest expiry first.
        let mut credits = load_credits(&mut tx, &locked).await?;
        let mut spent: Vec<(i64, i64)> = Vec::new();
        let mut paid_in: Vec<(i64, DateTime<Utc>, i64)> = Vec::new();
        for ((account_id, month), added) in &per_month {
            let (Some(list), Some(allowance)) = (
                credits.get_mut(account_id),
                allowance_in(*account_id, *month),
            ) else {
                continue;
            };
            let after = used.get(&(*account_id, *month)).copied().unwrap_or(*added);
            let beyond = beyond_allowance(allowance, after - added, after);
            let at = if *month == current {
                now
            } else {
                month.judged_at(now)
            };
            for (id, take) in spend_credits(list, beyond, at) {
                if let Some(c) = list.iter_mut().find(|c| c.id == id) {
                    c.remaining -= take;
                }
                spent.push((id, take));
                paid_in.push((*account_id, month.start(), take));
            }
        }
        spend(&mut tx, &spent).await?;
        super::credits_spent::record(&mut tx, &paid_in).await?;

        // Thresholds crossed by this batch go out with it, or not at all.
        let mut recorded = 0;
        if let Some(thresholds) = &self.thresholds {
            let events = batch_events(thresholds, &per_month, &used, allowance_in, &accounted);
            recorded = crate::notify::outbox::record(&mut tx, &events).await?;
        }

        // Where each account touched this month stands now, and what its markers become.
        let today = Day::containing(now);
        let mut restored = Vec::new();
        let mut day_exhausted = Vec::new();
        let mut day_restored = Vec::new();
        for ((account_id, month), sub) in &active_in {
            if *month != current {
                continue;
            }
            let Some(allowance) = allowance_in(*account_id, current) else {
                continue;
            };
            let standing = standing_of(
                sub,
                allowance,
                used.get(&(*account_id, current)).copied().unwrap_or(0),
                credits.get(account_id).map_or(0, |l| credits_at(l, now)),
                used_on.get(&(*account_id, today)).copied().unwrap_or(0),
            );
            // A marker this replica holds for an account with allowance again (e.g.
            // written by another replica just after an upgrade) is healed here.
            match marker_action(&standing, self.throttler.is_marked(*account_id, now)) {
                MarkerAction::Exhaust => outcome.exhausted.push(*account_id),
                MarkerAction::Restore => restored.push(*account_id),
                MarkerAction::Keep => {}
            }
            if used_on.contains_key(&(*account_id, today)) {
                let marked = self.throttler.is_marked_today(*account_id, now);
                match daily_marker_action(&standing, marked) {
                    MarkerAction::Exhaust => day_exhausted.push(*account_id),
                    MarkerAction::Restore => day_restored.push(*account_id),
                    MarkerAction::Keep => {}
                }
            }
            outcome.standings.push(standing);
        }
        outcome.standings.sort_by_key(|s| s.account_id);
        // Handed over while the account locks are held: an upgrade that commits after
        // us queues its restore behind this exhaust on the same worker, so this
        // replica can never leave a marker on an account that has allowance again.
        for account_id in &outcome.exhausted {
            self.throttler.exhaust(*account_id, current, now);
        }
        for account_id in restored {
            self.throttler.restore(account_id, now);
        }
        for account_id in day_exhausted {
            self.throttler.exhaust_day(account_id, today, now);
        }
        for account_id in day_restored {
            self.throttler.restore_day(account_id, now);
        }
        announce_standings(&mut tx, self.quota.replica(), &outcome.standings).await?;
        tx.commit().await?;

        // Only committed rows are remembered.
        {
            let mut known_snapshots = self.known();
            if known_snapshots.len() > MAX_KNOWN_SNAPSHOTS {
                known_snapshots.clear();
            }
            for g in &unknown_grants {
                known_snapshots
                    .entry((g.subscription_id, g.month))
                    .or_insert(None);
            }
            known_snapshots.extend(loaded.into_iter().map(|(k, a)| (k, Some(a))));
        }

        self.quota.observe(&outcome.standings, now);
        let committed = Utc::now();
        for e in &accounted {
            let lag = (committed - e.occurred_at).to_std().unwrap_or_default();
            metrics::histogram!("tollgate_usage_accounting_lag_seconds").record(lag.as_secs_f64());
        }
        metrics::counter!("tollgate_usage_events_accounted_total")
            .increment(outcome.accounted as u64);
        metrics::counter!("tollgate_usage_events_duplicate_total")
            .increment(outcome.duplicates as u64);
        if recorded > 0 {
            metrics::counter!("tollgate_notify_events_recorded_total").increment(recorded);
        }
        Ok(outcome)
    }
}
