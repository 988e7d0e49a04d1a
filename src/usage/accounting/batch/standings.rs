//! The stages of a batch that judge the counted figures: top-up credit paying what went
//! past the allowance, the webhook thresholds crossed, and the markers each account's
//! standing calls for.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::super::ledger_sql::spend;
use super::super::thresholds::batch_events;
use super::value::{Batch, Shared};
use crate::month::{Day, Month};
use crate::usage::report::load_credits;
use crate::usage::rules::{MarkerAction, daily_marker_action, marker_action, standing_of};
use crate::usage::spending::{beyond_allowance, credits_at, spend_credits};

/// Pays the units the batch took past each month's allowance from top-up credit,
/// earliest expiry first.
pub(super) async fn pay_from_credit(
    tx: &mut PgConnection,
    batch: &mut Batch<'_>,
) -> Result<(), sqlx::Error> {
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
    super::super::credits_spent::record(tx, &paid_in).await
}

/// Writes the webhook events of the thresholds this batch crossed (with webhooks on):
/// they go out with the batch, or not at all.
pub(super) async fn record_thresholds(
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
pub(super) fn judge_markers(acc: &Shared<'_>, batch: &mut Batch<'_>) {
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
