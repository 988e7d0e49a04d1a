//! The ledger's monthly partitions (migration V13): `subscription_tracking` holds one
//! partition per UTC month, made by the SQL function `subscription_tracking_add_month`.
//!
//! Whoever accounts usage makes the current and next month's partitions at startup and
//! then hourly ([`keep_ahead`]), so the month boundary finds its partition waiting. An
//! event whose month still has none (a late event for a month an operator detached, a
//! clock far off) is not refused: the accountant makes the partition on demand
//! ([`Partitions::ensure`]) and, should an insert still find none, makes it and retries
//! ([`is_missing_partition`]). The DEFAULT partition `subscription_tracking_default` only
//! catches rows inserted by hand for months without a partition; making a month's
//! partition moves them into it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::month::Month;
use crate::sync::lock;

/// How often [`keep_ahead`] checks that the current and next month have partitions.
const KEEP_AHEAD_EVERY: Duration = Duration::from_secs(3600);

/// How soon [`keep_ahead`] tries again after a failure.
const RETRY_EVERY: Duration = Duration::from_secs(60);

/// Bound of the wait for the ledger's lock when a partition is made: making one waits for
/// the transactions using the ledger, and every new one queues behind it meanwhile.
const MAKE_LOCK_TIMEOUT: &str = "5s";

/// Months this process knows to have a partition. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct Partitions {
    db: PgPool,
    made: Arc<Mutex<HashSet<Month>>>,
}

impl Partitions {
    pub fn new(db: PgPool) -> Self {
        Self {
            db,
            made: Default::default(),
        }
    }

    /// Makes sure each of `months` has a partition; only months not already known cost a
    /// round trip.
    pub async fn ensure(&self, months: impl IntoIterator<Item = Month>) -> Result<(), sqlx::Error> {
        let missing: Vec<Month> = {
            let made = lock(&self.made);
            months
                .into_iter()
                .filter(|m| !made.contains(m))
                .collect::<HashSet<_>>()
                .into_iter()
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        make_months(&self.db, &missing).await?;
        lock(&self.made).extend(missing);
        Ok(())
    }

    /// Forgets `months`, after an insert found no partition for one of them (an operator
    /// detached or dropped it): the next [`Partitions::ensure`] makes them again.
    pub fn forget(&self, months: impl IntoIterator<Item = Month>) {
        let mut made = lock(&self.made);
        for m in months {
            made.remove(&m);
        }
    }
}

/// Makes the partitions of `months` that do not exist, in one short transaction.
#[tracing::instrument(skip_all, fields(months = months.len()))]
pub async fn make_months(db: &PgPool, months: &[Month]) -> Result<(), sqlx::Error> {
    let starts: Vec<DateTime<Utc>> = months.iter().map(|m| m.start()).collect();
    let mut tx = db
        .begin_with(format!(
            "BEGIN; SET LOCAL lock_timeout = '{MAKE_LOCK_TIMEOUT}'"
        ))
        .await?;
    let made: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT subscription_tracking_add_month(m) FROM UNNEST($1::timestamptz[]) m",
    )
    .bind(&starts)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::debug!(?made, "ledger partitions checked");
    Ok(())
}

/// Whether an insert failed for want of a partition for its row's month.
pub fn is_missing_partition(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if db.code().as_deref() == Some("23514") && db.message().starts_with("no partition"))
}

/// Makes the current and next month's partitions now and then every hour, until `stop`.
pub async fn keep_ahead(db: PgPool, stop: CancellationToken) {
    loop {
        let current = Month::containing(Utc::now());
        let next_check = match make_months(&db, &[current, current.next()]).await {
            Ok(()) => KEEP_AHEAD_EVERY,
            Err(e) => {
                tracing::warn!(error = %e, "making the ledger's next partitions failed; retrying");
                RETRY_EVERY
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(next_check) => {}
        }
    }
}
