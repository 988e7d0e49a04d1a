//! What the throttler handle, its worker and its fleet listener share: the commands the
//! worker takes, and the state all read (the marker view, the store, the fleet, counters).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use super::admission::Admission;
use super::fleet::{Fleet, MarkerKind};
use super::store::MarkerStore;
use super::view::MarkerView;
use crate::month::{Day, Month};
use crate::telemetry::RateLimitedLog;

/// Tunables of the throttler.
#[derive(Debug, Clone)]
pub struct ThrottleSettings {
    pub admission_percent: u8,
    /// The worker's tick: lease renewal, and the shortest interval between listings.
    pub refresh_interval: Duration,
    pub max_staleness: Duration,
    /// The fleet's Cloudflare budget, which listings may take a share of.
    pub kv_call_budget: u32,
    pub kv_budget_window: Duration,
}

pub(super) enum Command {
    Exhaust {
        account_id: i64,
        month: Month,
        now: DateTime<Utc>,
    },
    Restore {
        account_id: i64,
        month: Month,
    },
    ExhaustDay {
        account_id: i64,
        day: Day,
        now: DateTime<Utc>,
    },
    RestoreDay {
        account_id: i64,
        day: Day,
    },
}

pub(super) struct Inner {
    pub(super) settings: ThrottleSettings,
    pub(super) view: MarkerView,
    pub(super) store: MarkerStore,
    pub(super) fleet: Fleet,
    pub(super) commands: mpsc::Sender<Command>,
    /// Accounts with an exhaust in flight, so a hot account queues one write.
    pub(super) pending: Mutex<HashSet<i64>>,
    /// Accounts whose last write failed, and when to try again.
    pub(super) retry_at: Mutex<HashMap<i64, Instant>>,
    pub(super) fail_open: AtomicU64,
    pub(super) markers_written: AtomicU64,
    pub(super) markers_removed: AtomicU64,
    /// KV listings this process made as the fleet's lister.
    pub(super) listings: AtomicU64,
    /// Whether this process held the lister's lease at its last tick.
    pub(super) lister: std::sync::atomic::AtomicBool,
    /// Markers written whose re-check against PostgreSQL failed: (kind, period, account),
    /// tried again at the next tick.
    pub(super) rechecks: Mutex<HashSet<(MarkerKind, i64, i64)>>,
    pub(super) fail_open_log: RateLimitedLog,
    /// Set once this replica has seen a plan with a daily allowance: from then on each
    /// refresh also lists the daily markers.
    pub(super) daily_in_use: std::sync::atomic::AtomicBool,
}

impl Inner {
    /// A marked account's call: admitted when its bucket is below the percentage.
    pub(super) fn bucket_decision(&self, account_id: i64, request_id: uuid::Uuid) -> Admission {
        let bucket = super::admission::bucket(account_id, request_id);
        if super::admission::admits(bucket, self.settings.admission_percent) {
            Admission::AdmittedByBucket
        } else {
            Admission::Throttled
        }
    }

    pub(super) fn note_fail_open(&self, reason: &'static str, message: &'static str) {
        self.fail_open.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("tollgate_throttle_fail_open_total", "reason" => reason).increment(1);
        if self.fail_open_log.allow() {
            tracing::warn!(
                reason,
                suppressed = self.fail_open_log.take_suppressed(),
                "{message}"
            );
        }
    }
}
