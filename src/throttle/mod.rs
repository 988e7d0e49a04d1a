//! Soft throttling (SPEC §5, §8): hash admission over a local view of exhaustion markers.
//!
//! The throttler owns admission and exposes only [`Throttler::exhaust`] and
//! [`Throttler::restore`] to the rest of the crate. Marker writes, deletes and KV listings
//! happen on one background worker, so neither the proxy nor the usage listener ever
//! waits for Cloudflare. The view follows the fleet's markers in PostgreSQL ([`fleet`]):
//! one process lists KV for all, every process records its own writes there, and each
//! replica hears every change within a second. Every failure fails open, with a
//! rate-limited warning and a metric.

pub mod admission;
mod core;
pub mod fleet;
mod listing;
pub mod minute;
pub mod presence;
pub mod rate;
pub mod reconcile;
mod settle;
pub mod store;
pub mod view;
mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};
use metrics::Counter;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use self::core::ThrottleSettings;
use self::core::{Command, Inner};
use crate::sync::lock;
pub use admission::Admission;
pub use fleet::{Fleet, MarkerCheck, WantedMarkers};
pub use reconcile::ReconcileReport;
pub use store::{MarkerStore, marker_key};
use view::{Lookup, MarkerView};

use crate::month::{Day, Month};
use crate::telemetry::{RateLimitedLog, Registered};

/// Counters a test or an operator can read without scraping metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThrottleStats {
    pub fail_open: u64,
    pub markers_written: u64,
    pub markers_removed: u64,
    /// KV listings made as the fleet's lister.
    pub listings: u64,
}

/// Handle to the throttler. Cheap to clone; `disabled()` admits everything.
#[derive(Clone)]
pub struct Throttler {
    inner: Option<Arc<Inner>>,
}

/// Depth of the worker's command queue.
const COMMAND_QUEUE: usize = 4096;

impl Throttler {
    /// Throttling off (`throttle.enabled = false`): admit all, write nothing.
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    /// Starts the worker that owns marker I/O (and, while this process holds the lease,
    /// the fleet's KV listing) and the listener that keeps the view in line with the
    /// fleet's markers.
    pub fn start(
        settings: ThrottleSettings,
        store: MarkerStore,
        fleet: Fleet,
        stop: CancellationToken,
    ) -> (Self, Vec<JoinHandle<()>>) {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let inner = Arc::new(Inner {
            view: MarkerView::new(settings.max_staleness),
            settings,
            store,
            fleet,
            commands: tx,
            pending: Mutex::new(HashSet::new()),
            retry_at: Mutex::new(HashMap::new()),
            fail_open: AtomicU64::new(0),
            markers_written: AtomicU64::new(0),
            markers_removed: AtomicU64::new(0),
            listings: AtomicU64::new(0),
            lister: Default::default(),
            rechecks: Mutex::new(HashSet::new()),
            fail_open_log: RateLimitedLog::default(),
            daily_in_use: Default::default(),
        });
        let listener = tokio::spawn(fleet::listen::run(inner.clone(), stop.clone()));
        let worker = tokio::spawn(worker::run(inner.clone(), rx, stop));
        (Self { inner: Some(inner) }, vec![worker, listener])
    }

    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Decides one call. Reads only the local view.
    pub fn admit(&self, account_id: i64, request_id: Uuid, now: DateTime<Utc>) -> Admission {
        let decision = match &self.inner {
            None => Admission::Disabled,
            Some(inner) => {
                let (month, day) = (Month::containing(now), Day::containing(now));
                match inner
                    .view
                    .lookup_both(account_id, month, day, Instant::now())
                {
                    (Lookup::Unmarked, true) => inner.bucket_decision(account_id, request_id),
                    (lookup, _) => match lookup {
                        Lookup::Unmarked => Admission::Unmarked,
                        Lookup::Stale => {
                            inner.note_fail_open("stale_view", "marker view is stale; admitting");
                            Admission::FailOpen
                        }
                        Lookup::Marked => inner.bucket_decision(account_id, request_id),
                    },
                }
            }
        };
        static OUTCOMES: [Registered<Counter>; Admission::COUNT] =
            [const { Registered::new() }; Admission::COUNT];
        OUTCOMES[decision as usize]
            .get(|| metrics::counter!("tollgate_admission_total", "outcome" => decision.label()))
            .increment(1);
        decision
    }

    /// The account has nothing left in `month`. Writes the marker (when absent)
    /// in the background; a past month writes nothing. Never waits.
    pub fn exhaust(&self, account_id: i64, month: Month, now: DateTime<Utc>) {
        let Some(inner) = &self.inner else { return };
        if month != Month::containing(now) || inner.view.knows(account_id, month) {
            return;
        }
        if let Some(at) = lock(&inner.retry_at).get(&account_id)
            && Instant::now() < *at
        {
            return;
        }
        if !lock(&inner.pending).insert(account_id) {
            return;
        }
        if inner
            .commands
            .try_send(Command::Exhaust {
                account_id,
                month,
                now,
            })
            .is_err()
        {
            lock(&inner.pending).remove(&account_id);
            inner.note_fail_open(
                "queue_full",
                "throttle command queue full; marker not written",
            );
        }
    }

    /// The account has allowance again: forget the marker here at once and delete it
    /// from the store in the background.
    pub fn restore(&self, account_id: i64, now: DateTime<Utc>) {
        let Some(inner) = &self.inner else { return };
        let month = Month::containing(now);
        inner.view.remove(account_id);
        lock(&inner.retry_at).remove(&account_id);
        if inner
            .commands
            .try_send(Command::Restore { account_id, month })
            .is_err()
        {
            inner.note_fail_open(
                "queue_full",
                "throttle command queue full; marker not removed",
            );
        }
    }

    /// The account's day is used up: writes its daily marker (when absent) in the
    /// background; a past day writes nothing. Never waits.
    pub fn exhaust_day(&self, account_id: i64, day: Day, now: DateTime<Utc>) {
        let Some(inner) = &self.inner else { return };
        inner.daily_in_use.store(true, Ordering::Relaxed);
        if day != Day::containing(now) || inner.view.day_marked(account_id, day) {
            return;
        }
        let command = Command::ExhaustDay {
            account_id,
            day,
            now,
        };
        if inner.commands.try_send(command).is_err() {
            inner.note_fail_open(
                "queue_full",
                "throttle command queue full; daily marker not written",
            );
        }
    }

    /// The account's day has units again: forget its daily marker at once and delete it
    /// from the store in the background.
    pub fn restore_day(&self, account_id: i64, now: DateTime<Utc>) {
        let Some(inner) = &self.inner else { return };
        inner.view.remove_day(account_id);
        let command = Command::RestoreDay {
            account_id,
            day: Day::containing(now),
        };
        if inner.commands.try_send(command).is_err() {
            inner.note_fail_open(
                "queue_full",
                "throttle command queue full; daily marker not removed",
            );
        }
    }

    /// Whether this replica's view holds a daily marker for the account today.
    pub fn is_marked_today(&self, account_id: i64, now: DateTime<Utc>) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.view.day_marked(account_id, Day::containing(now)))
    }

    /// Tells the throttler that plans with daily allowances exist, so its refreshes
    /// list the daily markers too.
    pub fn watch_daily(&self) {
        if let Some(inner) = &self.inner {
            inner.daily_in_use.store(true, Ordering::Relaxed);
        }
    }

    pub fn stats(&self) -> ThrottleStats {
        self.inner
            .as_ref()
            .map_or_else(ThrottleStats::default, |i| ThrottleStats {
                fail_open: i.fail_open.load(Ordering::Relaxed),
                markers_written: i.markers_written.load(Ordering::Relaxed),
                markers_removed: i.markers_removed.load(Ordering::Relaxed),
                listings: i.listings.load(Ordering::Relaxed),
            })
    }

    /// Whether this process held the fleet's lister lease at its last tick.
    pub fn is_lister(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.lister.load(Ordering::Relaxed))
    }

    /// Whether this replica's view holds a marker for the account this month.
    pub fn is_marked(&self, account_id: i64, now: DateTime<Utc>) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.view.knows(account_id, Month::containing(now)))
    }

    /// Makes the store agree with `exhausted` (the accounts PostgreSQL says have
    /// nothing left in the current month). See [`reconcile`].
    pub async fn reconcile(
        &self,
        exhausted: &HashSet<i64>,
        checked: &HashSet<i64>,
        now: DateTime<Utc>,
    ) -> Result<ReconcileReport, store::StoreError> {
        match &self.inner {
            None => Ok(ReconcileReport {
                accounts_checked: checked.len(),
                ..Default::default()
            }),
            Some(inner) => reconcile::run(inner, exhausted, checked, now).await,
        }
    }
}
