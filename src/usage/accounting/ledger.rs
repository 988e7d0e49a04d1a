//! The ledger's accountant: accounting one batch of usage events in one transaction.
//!
//! [`Accountant`] holds what every batch shares (the pool, the free grant, the
//! throttler, the quota view, the partitions made, and the grant snapshots this
//! replica has seen: they never change once written, so they are kept in memory). The
//! batch itself runs in named stages in `batch.rs`: lock the accounts in id order (so
//! replicas never deadlock), ensure grants, insert the rows at most once, bump the
//! counters by exactly the rows inserted, pay from credit, record thresholds crossed,
//! judge markers, announce the standings.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use super::batch::{BatchOutcome, Locks};
use super::batch::{KnownSnapshots, Shared, account_batch};
use super::event::UsageEvent;
use super::partitions::{Partitions, is_missing_partition};
use crate::month::Month;
use crate::throttle::Throttler;
use crate::usage::analytics::{PendingLatencies, RouteBook};
use crate::usage::standing::QuotaView;

/// Default bound of a wait for an account's row lock.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(1);

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
    /// `notify.thresholds`, ascending, when threshold webhooks are on; shared by the
    /// clones, replaced by a reload.
    thresholds: Option<Arc<ArcSwap<Vec<u8>>>>,
    /// How the rollup names routes, and the routes it knows per account and month.
    routes: Arc<RouteBook>,
    /// The rollup's latencies not yet merged (shared by the clones).
    latencies: PendingLatencies,
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
            routes: Arc::new(RouteBook::new([], 100)),
            latencies: PendingLatencies::default(),
        }
    }

    /// Merges the rollup's latencies into their rows every `every` until `stop`
    /// (and once more then).
    pub fn merge_latencies(&self, every: Duration, stop: CancellationToken) -> JoinHandle<()> {
        self.latencies.start(self.db.clone(), every, stop)
    }

    /// Merges the latencies waiting now (tests and benchmarks that read them at once).
    pub async fn flush_latencies(&self) -> Result<usize, sqlx::Error> {
        self.latencies.flush(&self.db).await
    }

    /// Names the rollup's routes after the configured prefixes, bounded per account and
    /// month (SPEC §18).
    pub fn with_routes(mut self, routes: Arc<RouteBook>) -> Self {
        self.routes = routes;
        self
    }

    /// Records an outbox event for every one of `thresholds` (percentages of the
    /// month's allowance) an account crosses (SPEC §7).
    pub fn with_thresholds(mut self, thresholds: &[u8]) -> Self {
        self.thresholds = Some(Arc::new(ArcSwap::from_pointee(ascending(thresholds))));
        self
    }

    /// Records the batches from now on against `thresholds` instead (a reload, SPEC
    /// §20); nothing when threshold webhooks are off.
    pub fn replace_thresholds(&self, thresholds: &[u8]) {
        if let Some(current) = &self.thresholds {
            current.store(Arc::new(ascending(thresholds)));
        }
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
            return Ok(BatchOutcome {
                ignored: events.len(),
                ..Default::default()
            });
        }
        let months = || events.iter().map(|e| Month::containing(e.occurred_at));
        self.partitions.ensure(months()).await?;
        // One batch, one list of thresholds, whatever a reload does meanwhile.
        let thresholds = self.thresholds.as_ref().map(|t| t.load_full());
        let shared = self.shared(thresholds.as_deref());
        match account_batch(&shared, self.begin().await?, events, now, locks).await {
            Err(e) if is_missing_partition(&e) => {
                tracing::warn!("a ledger partition went missing; making it again");
                self.partitions.forget(months());
                self.partitions.ensure(months()).await?;
                account_batch(&shared, self.begin().await?, events, now, locks).await
            }
            outcome => outcome,
        }
    }

    /// Opens an accounting transaction. A lock held elsewhere (a long transaction, a
    /// stuck session) must not stall accounting: the wait is bounded, and past it the
    /// caller skips the busy rows. The bound travels with BEGIN, in the same round trip.
    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.db
            .begin_with(format!(
                "BEGIN; SET LOCAL lock_timeout = '{}ms'",
                self.lock_timeout.as_millis()
            ))
            .await
    }

    /// What a batch takes from this accountant, with the `thresholds` in force.
    fn shared<'a>(&'a self, thresholds: Option<&'a Vec<u8>>) -> Shared<'a> {
        Shared {
            free_monthly_calls: self.free_monthly_calls,
            throttler: &self.throttler,
            quota: &self.quota,
            thresholds: thresholds.map(Vec::as_slice),
            known: &self.known,
            routes: &self.routes,
            latencies: &self.latencies,
        }
    }
}

/// `thresholds` ascending, each once.
fn ascending(thresholds: &[u8]) -> Vec<u8> {
    let mut sorted = thresholds.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted
}
