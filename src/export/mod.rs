//! Usage leaving the gateway (SPEC §14): the month's usage as CSV, and metered billing
//! in Stripe.
//!
//! - [`csv`]: the streamed CSV of a month, page by page;
//! - [`windows`]: export windows and cursors in PostgreSQL — which units each meter
//!   event carries, fixed before the first attempt;
//! - [`stripe`]: the meter events call and what Stripe's answer means;
//! - [`exporter`]: the task that, holding the fleet's export lease, opens windows and
//!   sends them, retrying with back-off across restarts.
//!
//! It reads what usage writes (counters, standings) and never changes a quota.

pub mod csv;
pub mod exporter;
pub mod stripe;
pub mod windows;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::BillingConfig;
pub use exporter::{Exporter, MeterSettings};

/// Starts the meter exporter when the export is on; says so when only half of it is
/// configured.
pub fn start(
    billing: &BillingConfig,
    db: &PgPool,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    let Some(settings) = MeterSettings::from_config(billing) else {
        if billing.stripe_api_key.is_some() != billing.meter_event_name.is_some() {
            tracing::warn!(
                "billing.stripe_api_key and billing.meter_event_name are not both set: the \
                 Stripe meter export is off"
            );
        }
        return None;
    };
    describe_metrics();
    let exporter = Exporter::new(db.clone(), settings);
    Some(tokio::spawn(exporter.run(stop)))
}

/// Describes the export metrics for the exposition.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "tollgate_meter_events_sent_total",
        "meter events Stripe accepted (each an export window)"
    );
    metrics::describe_counter!(
        "tollgate_meter_units_sent_total",
        "units carried by the meter events Stripe accepted"
    );
    metrics::describe_counter!(
        "tollgate_meter_events_failed_total",
        "meter events Stripe refused with a 4xx other than 429 (their units go out again in the next window)"
    );
    metrics::describe_counter!(
        "tollgate_meter_attempt_failures_total",
        "meter event attempts answered 429 or 5xx, timed out or unreachable (each retried)"
    );
    metrics::describe_gauge!(
        "tollgate_meter_oldest_unexported_age_seconds",
        "age of the oldest units in an open export window (reported by the exporting process)"
    );
    metrics::describe_gauge!(
        "tollgate_meter_export_lease",
        "1 while this process holds the meter export lease"
    );
    metrics::describe_counter!(
        "tollgate_meter_database_errors_total",
        "database errors of the meter exporter (each retried)"
    );
}
