//! The meter exporter (SPEC §14): the task that sends each account's new units to
//! Stripe as one meter event per `billing.meter_interval_s`.
//!
//! Every process that accounts usage runs one; only the holder of the export lease
//! (`notify::lease::METER_EXPORT`) works. Each round it renews the lease, opens the
//! windows whose turn has come ([`windows::open_due`]: identifier and figures written
//! before any attempt), sends the due ones a few at a time, and records every outcome:
//! accepted (the cursor moves), retry later with back-off (429, 5xx, timeouts,
//! no connection), or refused (other 4xx: failed with Stripe's message, counted). All
//! state is in PostgreSQL, so a restart, or another process taking over, resends the
//! open windows with their identifiers; Stripe's deduplication keeps each unit once.

use std::time::Duration;

use futures_util::StreamExt;
use secrecy::SecretString;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::stripe::{Answer, MeterClient, MeterEvent};
use super::windows::{self, Due};
use crate::config::BillingConfig;
use crate::notify::backoff::{AfterFailure, Schedule};
use crate::notify::lease::METER_EXPORT;

/// Events in flight at once (Stripe allows one call at a time per customer and meter;
/// each window is a different account).
const CONCURRENCY: usize = 8;

/// The longest a round waits before looking again.
const MAX_POLL: Duration = Duration::from_secs(1);

/// What the exporter needs from `[billing]`.
#[derive(Debug, Clone)]
pub struct MeterSettings {
    pub api_base: String,
    pub api_key: SecretString,
    pub event_name: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub schedule: Schedule,
}

impl MeterSettings {
    /// The settings when the export is on (API key and event name set).
    pub fn from_config(billing: &BillingConfig) -> Option<Self> {
        Some(Self {
            api_base: billing.stripe_api_base.clone(),
            api_key: billing.stripe_api_key.clone()?,
            event_name: billing.meter_event_name.clone()?,
            interval: Duration::from_secs(billing.meter_interval_s.max(1)),
            timeout: Duration::from_millis(billing.meter_timeout_ms),
            schedule: Schedule {
                // Retried for as long as it takes: a window is never given up on a
                // failure that may be Stripe's.
                window: Duration::from_secs(100 * 365 * 24 * 3600),
                ..Schedule::new(
                    Duration::from_millis(billing.meter_retry_initial_ms),
                    Duration::from_millis(billing.meter_retry_max_ms),
                )
            },
        })
    }

    /// The lease outlives a round: one batch of attempts, each bounded by `timeout`.
    fn lease_ttl(&self) -> Duration {
        self.timeout * 3 + Duration::from_secs(5)
    }
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    pub opened: u64,
    pub accepted: usize,
    pub retried: usize,
    pub refused: usize,
}

impl Round {
    fn attempted(&self) -> usize {
        self.accepted + self.retried + self.refused
    }
}

/// One exporting process.
#[derive(Debug, Clone)]
pub struct Exporter {
    db: PgPool,
    client: MeterClient,
    settings: MeterSettings,
    process: Uuid,
}

impl Exporter {
    pub fn new(db: PgPool, settings: MeterSettings) -> Self {
        let client = MeterClient::new(
            &settings.api_base,
            settings.api_key.clone(),
            settings.event_name.clone(),
            settings.timeout,
        );
        Self {
            db,
            client,
            settings,
            process: Uuid::new_v4(),
        }
    }

    /// Takes or renews the export lease; `false` while another process holds it.
    pub async fn hold_lease(&self) -> Result<bool, sqlx::Error> {
        METER_EXPORT
            .hold(&self.db, self.process, self.settings.lease_ttl())
            .await
    }

    /// One round, lease aside: open the windows whose turn has come, then send the due
    /// ones (at most [`CONCURRENCY`] at once) and record each outcome.
    pub async fn round(&self) -> Result<Round, sqlx::Error> {
        let mut round = Round {
            opened: windows::open_due(&self.db, self.settings.interval.as_secs()).await?,
            ..Round::default()
        };
        let due = windows::due(&self.db, CONCURRENCY as i64 * 4).await?;
        let outcomes: Vec<(Due, Answer)> = futures_util::stream::iter(due)
            .map(|window| async move {
                let answer = self
                    .client
                    .send(&MeterEvent {
                        identifier: &window.identifier,
                        customer: &window.customer,
                        value: window.value(),
                        timestamp: window.to_at.timestamp(),
                    })
                    .await;
                (window, answer)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (window, answer) in outcomes {
            self.record(&window, &answer).await?;
            match answer {
                Answer::Accepted => round.accepted += 1,
                Answer::Retry(_) => round.retried += 1,
                Answer::Refused(_) => round.refused += 1,
            }
        }
        Ok(round)
    }

    async fn record(&self, window: &Due, answer: &Answer) -> Result<(), sqlx::Error> {
        let account_id = window.account_id;
        match answer {
            Answer::Accepted => {
                windows::accepted(&self.db, window).await?;
                metrics::counter!("tollgate_meter_events_sent_total").increment(1);
                metrics::counter!("tollgate_meter_units_sent_total")
                    .increment(window.value().max(0) as u64);
            }
            Answer::Retry(reason) => {
                let attempts = (window.attempts.max(0) as u32).saturating_add(1);
                let wait = match self.settings.schedule.after_failure(
                    attempts,
                    Duration::ZERO,
                    rand::random::<f64>(),
                ) {
                    AfterFailure::RetryIn(wait) => wait,
                    AfterFailure::GiveUp => self.settings.schedule.max,
                };
                tracing::warn!(account_id, identifier = %window.identifier, attempts, %reason,
                    "meter event not accepted yet; retrying in {:.1} s", wait.as_secs_f64());
                windows::retry_later(&self.db, window, wait.as_secs_f64(), reason).await?;
                metrics::counter!("tollgate_meter_attempt_failures_total").increment(1);
            }
            Answer::Refused(message) => {
                tracing::error!(account_id, identifier = %window.identifier, %message,
                    "Stripe refused a meter event; its units go out in the account's next window");
                windows::refused(&self.db, window, message).await?;
                metrics::counter!("tollgate_meter_events_failed_total").increment(1);
            }
        }
        Ok(())
    }

    /// Gives the lease up, so another process takes over at once.
    pub async fn release(&self) -> Result<(), sqlx::Error> {
        METER_EXPORT.release(&self.db, self.process).await
    }

    /// Runs rounds until `stop`: a round that attempted something is followed at once by
    /// the next; otherwise the task waits up to a second (less when the interval is
    /// shorter). Database errors are logged and the round is tried again.
    pub async fn run(self, stop: CancellationToken) {
        let poll = self.settings.interval.min(MAX_POLL);
        loop {
            let busy = match self.hold_lease().await {
                Ok(true) => {
                    metrics::gauge!("tollgate_meter_export_lease").set(1.0);
                    let round = self.round().await;
                    if let Ok(age) = windows::oldest_unexported_age(&self.db).await {
                        metrics::gauge!("tollgate_meter_oldest_unexported_age_seconds").set(age);
                    }
                    match round {
                        Ok(round) => round.attempted() > 0,
                        Err(e) => {
                            tracing::warn!(error = %e, "meter export round failed; retrying");
                            metrics::counter!("tollgate_meter_database_errors_total").increment(1);
                            false
                        }
                    }
                }
                Ok(false) => {
                    metrics::gauge!("tollgate_meter_export_lease").set(0.0);
                    false
                }
                Err(e) => {
                    tracing::warn!(error = %e, "meter export lease unavailable; retrying");
                    metrics::counter!("tollgate_meter_database_errors_total").increment(1);
                    false
                }
            };
            let wait = if busy { Duration::ZERO } else { poll };
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        if let Err(e) = self.release().await {
            tracing::warn!(error = %e, "meter export lease not released; it expires");
        }
        metrics::gauge!("tollgate_meter_export_lease").set(0.0);
    }
}
