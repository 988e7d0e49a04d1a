//! The stages of a batch that find each event's subscription and each month's
//! allowance: the quota snapshots written once per subscription and month, and
//! remembered by this process once their batch committed.

use std::collections::{BTreeMap, HashMap};

use sqlx::PgConnection;

use super::value::{Batch, KnownSnapshots, Shared};
use crate::month::Month;
use crate::sync::lock;
use crate::usage::grants::{
    Grant, allowance_of, ensure_free_subscriptions, ensure_snapshots, load_snapshots,
    load_subscriptions,
};
use crate::usage::rules::{Subscription, active_subscription};

/// Beyond this many remembered snapshots the memory starts over (months roll on).
const MAX_KNOWN_SNAPSHOTS: usize = 1_000_000;

/// Remembers, once their batch committed, the snapshots it wrote (`grants`) and the
/// allowances it read (`loaded`).
pub(super) fn remember(
    known: &KnownSnapshots,
    grants: &[Grant],
    loaded: HashMap<(i64, Month), i64>,
) {
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

/// Reads the accounts' subscriptions (giving a free one to accounts older than
/// subscription tracking), picks each event's subscription, and writes the months'
/// snapshots this process has not seen yet.
pub(super) async fn ensure_grants(
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

/// The subscription in force and its allowance for every account and month the batch
/// counted: remembered snapshots first, the others read once.
pub(super) async fn read_allowances(
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
