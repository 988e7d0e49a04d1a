//! What an account and each of its keys may still spend, decided at request time and
//! when operators change it (SPEC §4, §6, §13): the pure [`rules`] (which subscription
//! is active, an account's standing, what to do with its marker), this replica's
//! [`standing`] view (quota headers, hard limits on reserved units), per-key limits
//! ([`key_limits`]), grants, activations, top-ups and the usage reports.
//!
//! It owns every quota decision and never reads an event: `crate::accounting` turns
//! events into ledger rows and hands the figures it committed back to the view.

pub mod announce;
pub mod endings;
pub mod grants;
mod key_blocks;
pub mod key_limits;
pub mod reconcile;
pub mod report;
pub mod rules;
pub mod series;
pub mod spending;
pub mod standing;
pub mod subscriptions;
pub mod topups;

pub use report::UsageReport;
pub use rules::Standing;
