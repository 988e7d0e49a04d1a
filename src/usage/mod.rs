//! The usage domain (SPEC §4–§6, §13): what an account and each of its keys may still
//! spend, and what they spent.
//!
//! Two sides, each a room of its own:
//! - **request time** — the pure [`rules`] (which subscription is active, an account's
//!   standing, what to do with its marker), this replica's [`standing`] view (quota
//!   headers, hard limits on reserved units) and per-key limits ([`key_limits`]);
//! - **event time** — [`accounting`]: usage events in, ledger rows out, in batches of
//!   named stages, over the in-process queue or JetStream.
//!
//! Beside them: grants, activations and top-ups ([`grants`], [`subscriptions`],
//! [`topups`]), and the usage reports ([`report`], [`series`]). Accounting builds on the
//! rules and hands the figures it committed back to the view; nothing on the request
//! side imports accounting.

pub mod accounting;
pub mod analytics;
pub mod announce;
pub mod endings;
pub mod grants;
mod key_blocks;
pub mod key_limits;
pub mod reconcile;
pub mod report;
pub mod requests;
pub mod rules;
pub mod series;
pub mod spending;
pub mod standing;
pub mod subscriptions;
pub mod topups;

pub use report::UsageReport;
pub use rules::Standing;
