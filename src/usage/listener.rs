//! The usage listener: accounts queued events in PostgreSQL, in batches.
//!
//! One transaction per batch: lock the batch's accounts in id order (so replicas never
//! deadlock), ensure the months' grants, insert the ledger rows at most once, bump the
//! per-month counters by exactly the rows inserted, and collect the accounts whose
//! current month is used up. Exhaustion is handed to the throttler after commit.
//! Database errors are retried, then isolated event by event; the task never dies.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::event::UsageEvent;
use super::grants::{Grant, ensure_free_subscriptions, ensure_snapshots, load_subscriptions};
use super::report::standings;
use super::rules::active_subscription;
use crate::error::anyhow_chain;
use crate::month::Month;
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
}

/// Accounts events. Cheap to clone.
#[derive(Clone)]
pub struct Accountant {
    db: PgPool,
    free_monthly_calls: i64,
    enabled: bool,
    throttler: Throttler,
}

impl Accountant {
    pub fn new(db: PgPool, free_monthly_calls: i64, enabled: bool, throttler: Throttler) -> Self {
        Self {
            db,
            free_monthly_calls,
            enabled,
            throttler,
        }
    }

    /// Accounts `events` in one transaction; `now` decides the current month.
    #[tracing::instrument(skip_all, fields(events = events.len()))]
    pub async fn account(
        &self,
        events: &[UsageEvent],
        now: DateTime<Utc>,
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

        let mut tx = self.db.begin().await?;
        let locked: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM account WHERE id = ANY($1) ORDER BY id FOR UPDATE")
                .bind(&account_ids)
                .fetch_all(&mut *tx)
                .await?;
        let locked_set: HashSet<i64> = locked.iter().copied().collect();
        let (known, unknown): (Vec<&UsageEvent>, Vec<&UsageEvent>) = unique
            .into_iter()
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

        ensure_free_subscriptions(&mut tx, &locked, self.free_monthly_calls).await?;
        let subs = load_subscriptions(&mut tx, &locked).await?;
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
        let grants: Vec<Grant> = grants.into_values().collect();
        ensure_snapshots(&mut tx, &grants).await?;

        let inserted = insert_ledger_rows(&mut tx, &known, &subscription_of).await?;
        outcome.accounted = inserted.len();
        outcome.duplicates += known.len() - inserted.len();

        let mut per_month: BTreeMap<(i64, Month), i64> = BTreeMap::new();
        for e in known
            .iter()
            .filter(|e| inserted.contains(&e.transaction_id))
        {
            *per_month
                .entry((e.account_id, Month::containing(e.occurred_at)))
                .or_default() += 1;
        }
        bump_counters(&mut tx, &per_month).await?;

        let current = Month::containing(now);
        let touched: Vec<i64> = per_month
            .keys()
            .filter(|(_, m)| *m == current)
            .map(|(a, _)| *a)
            .collect();
        let mut restored = Vec::new();
        if !touched.is_empty() {
            for standing in
                standings(&mut tx, &touched, current, now, self.free_monthly_calls).await?
            {
                if standing.exhausted() {
                    outcome.exhausted.push(standing.account_id);
                } else if self.throttler.is_marked(standing.account_id, now) {
                    // A marker this replica holds for an account with allowance again
                    // (e.g. written by another replica just after an upgrade): heal it.
                    restored.push(standing.account_id);
                }
            }
        }
        // Handed over while the account locks are held: an upgrade that commits after
        // us queues its restore behind this exhaust on the same worker, so this
        // replica can never leave a marker on an account that has allowance again.
        for account_id in &outcome.exhausted {
            self.throttler.exhaust(*account_id, current, now);
        }
        for account_id in restored {
            self.throttler.restore(account_id, now);
        }
        tx.commit().await?;

        let committed = Utc::now();
        for e in known
            .iter()
            .filter(|e| inserted.contains(&e.transaction_id))
        {
            let lag = (committed - e.occurred_at).to_std().unwrap_or_default();
            metrics::histogram!("tollgate_usage_accounting_lag_seconds").record(lag.as_secs_f64());
        }
        metrics::counter!("tollgate_usage_events_accounted_total")
            .increment(outcome.accounted as u64);
        metrics::counter!("tollgate_usage_events_duplicate_total")
            .increment(outcome.duplicates as u64);
        Ok(outcome)
    }
}

async fn insert_ledger_rows(
    conn: &mut sqlx::PgConnection,
    events: &[&UsageEvent],
    subscription_of: &HashMap<Uuid, Option<i64>>,
) -> Result<HashSet<Uuid>, sqlx::Error> {
    let n = events.len();
    let (
        mut ids,
        mut accounts,
        mut subs,
        mut keys,
        mut times,
        mut methods,
        mut routes,
        mut statuses,
    ) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for e in events {
        ids.push(e.transaction_id);
        accounts.push(e.account_id);
        subs.push(subscription_of.get(&e.transaction_id).copied().flatten());
        keys.push(e.key_id);
        times.push(e.occurred_at);
        methods.push(e.method.as_str());
        routes.push(e.route.as_str());
        statuses.push(e.upstream_status as i16);
    }
    let inserted: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO subscription_tracking
             (transaction_id, account_id, subscription_id, key_id, occurred_at, method, route, upstream_status)
         SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[],
                              $5::timestamptz[], $6::text[], $7::text[], $8::smallint[])
         ON CONFLICT (transaction_id) DO NOTHING
         RETURNING transaction_id",
    )
    .bind(ids)
    .bind(accounts)
    .bind(subs)
    .bind(keys)
    .bind(times)
    .bind(methods)
    .bind(routes)
    .bind(statuses)
    .fetch_all(conn)
    .await?;
    Ok(inserted.into_iter().collect())
}

async fn bump_counters(
    conn: &mut sqlx::PgConnection,
    per_month: &BTreeMap<(i64, Month), i64>,
) -> Result<(), sqlx::Error> {
    if per_month.is_empty() {
        return Ok(());
    }
    let accounts: Vec<i64> = per_month.keys().map(|(a, _)| *a).collect();
    let months: Vec<DateTime<Utc>> = per_month.keys().map(|(_, m)| m.start()).collect();
    let counts: Vec<i64> = per_month.values().copied().collect();
    sqlx::query(
        "INSERT INTO usage_counter (account_id, month_start, used)
         SELECT * FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[])
         ON CONFLICT (account_id, month_start) DO UPDATE SET used = usage_counter.used + EXCLUDED.used",
    )
    .bind(accounts)
    .bind(months)
    .bind(counts)
    .execute(conn)
    .await?;
    Ok(())
}

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
    /// event cannot take the others with it.
    async fn account_resilient(&self, batch: &[UsageEvent]) {
        let mut refusals = 0;
        let mut outage_backoff = Duration::from_millis(100);
        let last_error = loop {
            match self.account(batch, Utc::now()).await {
                Ok(_) => return,
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
            return;
        }
        for event in batch {
            Box::pin(self.account_resilient(std::slice::from_ref(event))).await;
        }
    }
}

/// Runs the listener until `stop` fires, then drains what is queued within `drain_timeout`.
pub async fn run(
    accountant: Accountant,
    mut rx: mpsc::Receiver<UsageEvent>,
    batch_size: usize,
    stop: CancellationToken,
    drain_timeout: Duration,
) {
    let mut batch = Vec::with_capacity(batch_size);
    loop {
        let received = tokio::select! {
            n = rx.recv_many(&mut batch, batch_size) => n,
            _ = stop.cancelled() => break,
        };
        if received == 0 {
            break;
        }
        record_batch(&batch, rx.len());
        // A batch stuck on an unreachable database must not hold shutdown up: on stop
        // the attempt is abandoned (its transaction rolls back) and the batch is
        // accounted by the bounded drain below.
        let done = tokio::select! {
            _ = accountant.account_resilient(&batch) => true,
            _ = stop.cancelled() => false,
        };
        if !done {
            break;
        }
        batch.clear();
    }

    rx.close();
    let drained = tokio::time::timeout(drain_timeout, async {
        if !batch.is_empty() {
            accountant.account_resilient(&batch).await;
            batch.clear();
        }
        while rx.recv_many(&mut batch, batch_size).await > 0 {
            record_batch(&batch, rx.len());
            accountant.account_resilient(&batch).await;
            batch.clear();
        }
    })
    .await;
    if drained.is_err() {
        let lost = batch.len() + rx.len();
        metrics::counter!("tollgate_usage_events_dropped_total", "reason" => "shutdown")
            .increment(lost as u64);
        tracing::error!(lost, "usage queue not drained before the shutdown deadline");
    } else {
        tracing::info!("usage queue drained");
    }
}

fn record_batch(batch: &[UsageEvent], depth: usize) {
    metrics::histogram!("tollgate_usage_batch_size").record(batch.len() as f64);
    metrics::gauge!("tollgate_usage_queue_depth").set(depth as f64);
}
