//! The throttler's fleet (SPEC §8): what every process on one PostgreSQL shares so the
//! fleet spends one Cloudflare budget and lists KV once, whatever its size.
//!
//! - [`budget`]: the API token's call budget, counted in PostgreSQL for every process.
//! - [`lease`]: which process lists KV, and how often (stretched as markers grow).
//! - [`table`]: `fleet_marker`, the fleet's markers, which the lister keeps in line with
//!   KV and every process updates right after its own KV writes and deletes.
//! - [`listen`]: each process's LISTEN on the table's notifications, which keeps its
//!   marker view within a second of the fleet's.
//!
//! `docs/fleet-kv.md` tells the design and its arithmetic; migration V10 the tables.

pub mod budget;
pub mod lease;
pub(super) mod listen;
pub(super) mod table;

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// The notification channel of `fleet_marker` (migration V10).
pub const CHANNEL: &str = "tollgate_fleet_marker";

/// The two kinds of marker, as named in `fleet_marker.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerKind {
    /// `usage-exhausted:<account_id>:<month_start_unix>`
    Month,
    /// `usage-exhausted-daily:<account_id>:<day_start_unix>`
    Day,
}

impl MarkerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Month => "month",
            MarkerKind::Day => "day",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "month" => Some(MarkerKind::Month),
            "day" => Some(MarkerKind::Day),
            _ => None,
        }
    }
}

/// Which of some accounts PostgreSQL's standings call a marker for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WantedMarkers {
    /// Accounts whose month is used up (soft enforcement).
    pub month: HashSet<i64>,
    /// Accounts whose day is used up (soft enforcement).
    pub day: HashSet<i64>,
}

/// Asked right after this process wrote markers: does PostgreSQL still call for them?
/// Implemented by the usage side, which alone decides quotas.
#[async_trait::async_trait]
pub trait MarkerCheck: Send + Sync {
    async fn wanted(&self, accounts: &[i64], now: DateTime<Utc>) -> anyhow::Result<WantedMarkers>;
}

/// What the throttler needs to work as one of a fleet.
#[derive(Clone)]
pub struct Fleet {
    pub db: PgPool,
    /// This process, as the lister's lease names it.
    pub process: Uuid,
    /// `None` when metering is off: nothing decides quotas, so nothing is re-checked.
    pub check: Option<Arc<dyn MarkerCheck>>,
}

impl Fleet {
    pub fn new(db: PgPool, check: Option<Arc<dyn MarkerCheck>>) -> Self {
        Self {
            db,
            process: Uuid::new_v4(),
            check,
        }
    }
}
