//! Marker reconciliation, from the quota side: PostgreSQL decides which accounts
//! are exhausted this month, and the throttler makes the marker store agree.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::report::month_standings;
use crate::month::Month;
use crate::throttle::store::StoreError;
use crate::throttle::{ReconcileReport, Throttler};

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
