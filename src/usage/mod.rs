//! Monthly usage accounting (SPEC §4): grants, subscriptions, the ledger and its listener.
//!
//! Usage owns every quota decision. The proxy only publishes [`UsageEvent`]s; the
//! [`listener`] (or, over NATS, the [`jetstream`] consumer, see [`transport`]) turns
//! them into ledger rows and counters and tells the throttler when an account's
//! current month is used up.

pub mod announce;
mod batch;
mod credits_spent;
mod driver;
pub mod endings;
pub mod event;
pub mod grants;
pub mod jetstream;
mod key_blocks;
pub mod key_limits;
pub mod ledger;
mod ledger_sql;
pub mod listener;
pub mod partitions;
pub mod quota;
pub mod reconcile;
pub mod report;
pub mod rules;
pub mod series;
pub mod spending;
pub mod subscriptions;
pub mod thresholds;
pub mod topups;
pub mod transport;

pub use event::{PublishOutcome, UsageEvent, UsagePublisher};
pub use ledger::{Accountant, BatchOutcome, Locks};
pub use report::UsageReport;
pub use rules::Standing;
