//! Threshold webhooks (SPEC §7): telling the operator's receiver when an account's use
//! of its month crosses `notify.thresholds` percentages of its allowance.
//!
//! - [`outbox`]: `notification_outbox`, written by the accounting transaction that
//!   crossed a threshold (usage decides what crossed; see `usage::thresholds`), read by
//!   delivery;
//! - [`delivery`]: the task that POSTs pending events, in order per account, retrying
//!   with [`backoff`] for 24 hours;
//! - [`lease`]: which one process of the fleet delivers;
//! - [`signing`]: the `Tollgate-Signature` header.
//!
//! Nothing here is on the path of a call or of accounting: the receiver may be down for
//! a day and only the outbox grows. `docs/webhooks.md` is the receiver's guide.

pub mod backoff;
pub mod delivery;
pub mod lease;
pub mod outbox;
pub mod signing;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::NotifyConfig;
pub use delivery::DeliverySettings;

/// Starts the delivery task when webhooks are on (see [`delivery::run`]); says so when
/// only half of them is configured.
pub fn start(
    notify: &NotifyConfig,
    db: &PgPool,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    let Some(settings) = DeliverySettings::from_config(notify) else {
        if notify.webhook_url.is_some() != notify.webhook_secret.is_some() {
            tracing::warn!(
                "notify.webhook_url and notify.webhook_secret are not both set: threshold \
                 webhooks are off"
            );
        }
        return None;
    };
    describe_metrics();
    Some(tokio::spawn(delivery::run(db.clone(), settings, stop)))
}

/// Describes the webhook metrics for the exposition.
pub fn describe_metrics() {
    metrics::describe_counter!(
        "tollgate_notify_events_recorded_total",
        "threshold events written to the outbox by accounting"
    );
    metrics::describe_gauge!(
        "tollgate_notify_pending",
        "threshold events not yet delivered nor given up (reported by the delivering process)"
    );
    metrics::describe_gauge!(
        "tollgate_notify_oldest_pending_age_seconds",
        "age of the oldest pending threshold event (reported by the delivering process)"
    );
    metrics::describe_counter!(
        "tollgate_notify_delivered_total",
        "threshold events the receiver answered 2xx to"
    );
    metrics::describe_counter!(
        "tollgate_notify_failed_total",
        "threshold events given up after 24 hours of failed attempts"
    );
    metrics::describe_counter!(
        "tollgate_notify_attempt_failures_total",
        "failed webhook attempts, each retried while the event is less than 24 hours old"
    );
    metrics::describe_gauge!(
        "tollgate_notify_delivery_lease",
        "1 while this process holds the delivery lease"
    );
    metrics::describe_counter!(
        "tollgate_notify_database_errors_total",
        "database errors of the delivery task (each retried)"
    );
}
