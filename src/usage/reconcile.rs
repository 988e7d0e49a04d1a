//! Marker reconciliation, from the quota side: PostgreSQL decides which accounts
//! are exhausted this month, and the throttler makes the marker store agree. Also the
//! quota side's answer to the throttler's re-check after each marker write
//! ([`StandingCheck`]).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::report::{month_standings, standings};
use super::rules::{MarkerAction, daily_marker_action, marker_action};
use crate::month::Month;
use crate::throttle::store::StoreError;
use crate::throttle::{MarkerCheck, ReconcileReport, Throttler, WantedMarkers};

/// Accounts read from PostgreSQL per page.
const PAGE: i64 = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("reading usage failed")]
    Database(#[from] sqlx::Error),
    #[error("marker store unavailable")]
    Store(#[from] StoreError),
}

/// Runs one reconciliation of the current month.
#[tracing::instrument(skip_all)]
pub async fn reconcile_markers(
    db: &PgPool,
    throttler: &Throttler,
    free_monthly_calls: i64,
    now: DateTime<Utc>,
) -> Result<ReconcileReport, ReconcileError> {
    if !throttler.is_enabled() {
        return Ok(ReconcileReport::default());
    }
    let standings =
        month_standings(db, Month::containing(now), now, free_monthly_calls, PAGE).await?;
    let checked: HashSet<i64> = standings.iter().map(|s| s.account_id).collect();
    let exhausted: HashSet<i64> = standings
        .iter()
        .filter(|s| s.exhausted())
        .map(|s| s.account_id)
        .collect();
    match throttler.reconcile(&exhausted, &checked, now).await {
        // Markers are off (Cloudflare not configured): nothing to reconcile, which
        // is the fail-open behaviour, not an outage.
        Err(StoreError::Unconfigured) => {
            tracing::warn!("reconciliation skipped: cloudflare KV is not configured");
            Ok(ReconcileReport {
                accounts_checked: checked.len(),
                ..Default::default()
            })
        }
        other => Ok(other?),
    }
}

/// Tells the throttler, right after it wrote markers, which of them PostgreSQL's
/// standings still call for: the same rules as accounting's (soft plans only).
pub struct StandingCheck {
    pub db: PgPool,
    pub free_monthly_calls: i64,
}

#[async_trait::async_trait]
impl MarkerCheck for StandingCheck {
    async fn wanted(&self, accounts: &[i64], now: DateTime<Utc>) -> anyhow::Result<WantedMarkers> {
        // The batch that judged these accounts exhausted hands the marker over before
        // it commits: wait for it (and any plan change in flight), so the standings
        // read are the ones it commits, not the ones before.
        let mut tx = self
            .db
            .begin_with("BEGIN; SET LOCAL lock_timeout = '5s'")
            .await?;
        crate::db::await_account_writers(&mut tx, accounts).await?;
        let month = Month::containing(now);
        let standings = standings(&mut tx, accounts, month, now, self.free_monthly_calls).await?;
        tx.commit().await?;
        let mut wanted = WantedMarkers::default();
        for standing in &standings {
            if marker_action(standing, false) == MarkerAction::Exhaust {
                wanted.month.insert(standing.account_id);
            }
            if daily_marker_action(standing, false) == MarkerAction::Exhaust {
                wanted.day.insert(standing.account_id);
            }
        }
        Ok(wanted)
    }
}
