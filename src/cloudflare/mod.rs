//! Cloudflare Workers KV, through its REST API — and nothing else.
//!
//! This module owns every call tollgate makes to Cloudflare: reading, writing, deleting and
//! listing keys of one namespace, under a call budget (this process's, and optionally one
//! shared by every process on the token) and a 429 back-off so one token never trips
//! Cloudflare's per-token rate limit. It knows nothing of quotas or accounts;
//! the throttler decides what to write. `tollgate_testkit::fake_kv` serves the same contract
//! locally for tests.

mod budget;
mod call;
mod error;
mod kv;
mod settings;
mod wire;

#[cfg(test)]
mod tests;

pub use budget::{CallBudget, SharedBudget};
pub use error::KvError;
pub use kv::{BulkWrite, KeyInfo, KeyPage, KvClient};
pub use settings::KvSettings;

/// Registers the descriptions of the KV metrics with the installed recorder; call once at
/// startup, after installing it.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "tollgate_kv_calls_total",
        "Cloudflare KV calls that went to the network, by op and result \
         (ok, absent, error, rate_limited, timeout)."
    );
    metrics::describe_counter!(
        "tollgate_kv_budget_skipped_total",
        "Cloudflare KV calls refused locally because the call budget (this process's or the \
         fleet's, on one API token) was exhausted, by op."
    );
    metrics::describe_counter!(
        "tollgate_kv_backoff_skipped_total",
        "Cloudflare KV calls refused locally while backing off after a 429."
    );
}
