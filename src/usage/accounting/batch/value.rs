//! The value one batch carries through its stages ([`Batch`]), what it takes from its
//! accountant ([`Shared`]), and what it tells the caller ([`BatchOutcome`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::super::event::UsageEvent;
use crate::month::{Day, Month};
use crate::throttle::Throttler;
use crate::usage::grants::Grant;
use crate::usage::rules::{Standing, Subscription};
use crate::usage::spending::Credit;
use crate::usage::standing::QuotaView;

/// Snapshots known to exist, by subscription and month, with their allowance once it
/// has been read. Rows of `monthly_usage` are never changed or deleted, so what was
/// seen stays true.
pub type KnownSnapshots = Arc<Mutex<HashMap<(i64, Month), Option<i64>>>>;

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
    /// Where each account with calls accounted in the current month now stands.
    pub standings: Vec<Standing>,
    /// Accounts whose row lock was held elsewhere ([`Locks::SkipBusy`]): their events
    /// were left out of this batch, to be accounted later.
    pub busy: Vec<i64>,
}

/// How a batch takes its accounts' row locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locks {
    /// Wait for every lock, at most the accountant's lock timeout (then SQLSTATE 55P03).
    Wait,
    /// Take the locks that are free; account the other accounts' events, not these.
    SkipBusy,
}

/// What a batch takes from its accountant.
pub struct Shared<'a> {
    pub free_monthly_calls: i64,
    pub throttler: &'a Throttler,
    pub quota: &'a QuotaView,
    /// `notify.thresholds`, ascending, when threshold webhooks are on.
    pub thresholds: Option<&'a [u8]>,
    pub known: &'a KnownSnapshots,
    pub routes: &'a crate::usage::analytics::RouteBook,
    /// Where the latencies of committed batches wait to be merged.
    pub latencies: &'a crate::usage::analytics::PendingLatencies,
}

/// What one batch has found so far, stage by stage.
#[derive(Default)]
pub(super) struct Batch<'e> {
    /// The instant the standings are judged at (taken once the locks are held).
    pub(super) now: DateTime<Utc>,
    /// The accounts locked: those of the batch that exist and were not busy.
    pub(super) locked: Vec<i64>,
    /// The locked accounts' events, each transaction id once.
    pub(super) events: Vec<&'e UsageEvent>,
    /// Every subscription of the locked accounts.
    pub(super) subs: HashMap<i64, Vec<Subscription>>,
    /// The subscription each event is accounted to.
    pub(super) subscription_of: HashMap<Uuid, Option<i64>>,
    /// Snapshots written by this batch (remembered once it commits).
    pub(super) new_grants: Vec<Grant>,
    /// The events whose ledger row this batch inserted.
    pub(super) accounted: Vec<&'e UsageEvent>,
    /// Units added per account and month, and `used` after them.
    pub(super) per_month: BTreeMap<(i64, Month), i64>,
    pub(super) used: HashMap<(i64, Month), i64>,
    /// Units used per account and day after the batch.
    pub(super) used_on: HashMap<(i64, Day), i64>,
    /// The subscription in force and its allowance, per account and month touched.
    pub(super) active_in: BTreeMap<(i64, Month), (Subscription, i64)>,
    /// Allowances read from PostgreSQL (remembered once the batch commits).
    pub(super) loaded: HashMap<(i64, Month), i64>,
    /// Top-up credit of the locked accounts, less what this batch spent.
    pub(super) credits: HashMap<i64, Vec<Credit>>,
    /// Threshold events written to the outbox.
    pub(super) recorded: u64,
    pub(super) outcome: BatchOutcome,
    /// The latencies of the rollup rows written, handed over once committed.
    pub(super) latencies: Vec<(
        crate::usage::analytics::latency::RowKey,
        crate::usage::analytics::histogram::Histogram,
    )>,
}

impl Batch<'_> {
    /// The instant `month` is judged at: now for the current month, else its end.
    pub(super) fn judged_at(&self, month: Month) -> DateTime<Utc> {
        if month == Month::containing(self.now) {
            self.now
        } else {
            month.judged_at(self.now)
        }
    }

    pub(super) fn allowance_in(&self, account_id: i64, month: Month) -> Option<i64> {
        self.active_in.get(&(account_id, month)).map(|(_, a)| *a)
    }
}
