//! Threshold webhooks (SPEC §7): telling the operator's receiver when an account's use
//! of its month crosses `notify.thresholds` percentages of its allowance.
//!
//! - [`outbox`]: `notification_outbox`, written by the accounting transaction that
//!   crossed a threshold (usage decides what crossed; see `usage::thresholds`).

pub mod outbox;
