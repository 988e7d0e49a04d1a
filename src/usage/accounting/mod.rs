//! Usage events in, ledger rows out (SPEC §4): the proxy publishes [`UsageEvent`]s; the
//! in-process [`listener`] or, over NATS, the [`jetstream`] consumer (see [`transport`])
//! hands them in batches to the [`Accountant`], which records each batch in one
//! transaction of named stages (`batch.rs`) and tells the throttler when an account's
//! current month is used up.
//!
//! It builds on `crate::usage` for every rule and figure it applies; nothing there
//! imports it.

mod batch;
mod counters;
mod credits_spent;
mod driver;
pub mod event;
pub mod jetstream;
mod key_counters;
pub mod ledger;
mod ledger_sql;
pub mod listener;
pub mod partitions;
pub mod thresholds;
pub mod transport;

pub use event::{PublishOutcome, UsageEvent, UsagePublisher};
pub use ledger::{Accountant, BatchOutcome, Locks};
