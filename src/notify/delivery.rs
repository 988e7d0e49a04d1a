//! The delivery task: POSTs pending threshold events to the webhook (SPEC §7).
//!
//! Every process that accounts usage runs one; only the holder of the delivery lease
//! ([`lease`](super::lease)) sends. Each round it renews the lease, takes the due head
//! of up to [`ROUND`] accounts ([`outbox::due_heads`]), tries them all at once (one per
//! account, so each account's events go out in order), and records every outcome:
//! delivered on a 2xx, otherwise the next attempt per [`backoff`](super::backoff), or
//! failed once the retry window is over. A round that sent something is followed at
//! once by the next; otherwise the task sleeps `notify.poll_interval_ms`. All state is
//! in PostgreSQL, so a restart, or another process taking over, goes on where it was.
//! An attempt cut by shutdown is not recorded and is made again, with the same `id`.

use std::time::{Duration, Instant};

use chrono::Utc;
use reqwest::header::{CONTENT_TYPE, USER_AGENT};
use secrecy::ExposeSecret;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::backoff::{AfterFailure, Schedule};
use super::outbox::{self, Pending};
use super::{lease, signing};
use crate::config::{NotifyConfig, Webhook};
use crate::month::Month;
use crate::telemetry::RateLimitedLog;

/// Most accounts whose head event one round tries.
pub const ROUND: i64 = 32;

/// How often the backlog gauges are refreshed, and finished events of old months pruned.
const BACKLOG_EVERY: Duration = Duration::from_secs(1);
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// What delivery needs from `[notify]`.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    pub webhook: Webhook,
    pub timeout: Duration,
    pub schedule: Schedule,
    pub poll_interval: Duration,
    pub lease_ttl: Duration,
}

impl DeliverySettings {
    /// The settings when webhooks are on (`webhook_url` and `webhook_secret` set).
    pub fn from_config(notify: &NotifyConfig) -> Option<Self> {
        Some(Self {
            webhook: notify.webhook()?,
            timeout: notify.timeout(),
            schedule: Schedule::new(
                Duration::from_millis(notify.retry_initial_ms),
                Duration::from_millis(notify.retry_max_ms),
            ),
            poll_interval: Duration::from_millis(notify.poll_interval_ms),
            lease_ttl: Duration::from_millis(notify.lease_ttl_ms),
        })
    }
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// The receiver answered, but not 2xx.
    Status(u16),
    /// No complete answer within `notify.timeout_ms`.
    Timeout,
    /// No connection (refused, DNS, TLS) or a broken one.
    Unreachable(String),
}

impl Failure {
    /// The metric label.
    fn reason(&self) -> &'static str {
        match self {
            Failure::Status(_) => "status",
            Failure::Timeout => "timeout",
            Failure::Unreachable(_) => "unreachable",
        }
    }

    /// What `last_error` keeps.
    fn describe(&self) -> String {
        match self {
            Failure::Status(code) => format!("HTTP {code}"),
            Failure::Timeout => "timed out".into(),
            Failure::Unreachable(why) => format!("unreachable: {why}"),
        }
    }
}

/// Runs until `stop` fires: competes for the lease, delivers while holding it, gives
/// it up on the way out.
pub async fn run(db: PgPool, settings: DeliverySettings, stop: CancellationToken) {
    let client = match reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.timeout)
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "threshold webhooks cannot build an HTTP client; none will be sent");
            return;
        }
    };
    let process = Uuid::new_v4();
    let errors = RateLimitedLog::default();
    metrics::gauge!("tollgate_notify_delivery_lease").set(0.0);
    let mut holding = false;
    let mut backlog_at: Option<Instant> = None;
    let mut pruned_at: Option<Instant> = None;
    loop {
        if stop.is_cancelled() {
            break;
        }
        let held = match lease::hold(&db, process, settings.lease_ttl).await {
            Ok(held) => held,
            Err(e) => {
                database_error("lease", &e, &errors);
                false
            }
        };
        if held != holding {
            if held {
                tracing::info!("this process now delivers threshold webhooks");
            } else {
                tracing::info!("another process delivers threshold webhooks now");
                zero_backlog_gauges();
            }
            metrics::gauge!("tollgate_notify_delivery_lease").set(if held { 1.0 } else { 0.0 });
        }
        holding = held;

        let mut more = false;
        if holding {
            tokio::select! {
                round = round(&db, &client, &settings, &errors) => match round {
                    Ok(busy) => more = busy,
                    Err(e) => database_error("deliver", &e, &errors),
                },
                _ = stop.cancelled() => break,
            }
            if backlog_at.is_none_or(|at| at.elapsed() >= BACKLOG_EVERY) {
                backlog_at = Some(Instant::now());
                report_backlog(&db, &errors).await;
            }
            if pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
                pruned_at = Some(Instant::now());
                prune(&db, &errors).await;
            }
        }
        if !more {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(settings.poll_interval) => {}
            }
        }
    }
    if holding {
        if let Err(e) = lease::release(&db, process).await {
            database_error("lease", &e, &errors);
        }
        metrics::gauge!("tollgate_notify_delivery_lease").set(0.0);
        zero_backlog_gauges();
    }
}

/// One round: the due heads, tried together, their outcomes recorded. `true` when
/// there may be more due at once (something was delivered, or the round was full).
async fn round(
    db: &PgPool,
    client: &reqwest::Client,
    settings: &DeliverySettings,
    errors: &RateLimitedLog,
) -> Result<bool, sqlx::Error> {
    let heads = outbox::due_heads(db, ROUND).await?;
    if heads.is_empty() {
        return Ok(false);
    }
    let attempts = heads
        .iter()
        .map(|event| attempt(client, &settings.webhook, event));
    let results = futures_util::future::join_all(attempts).await;
    let mut delivered = 0usize;
    for (event, result) in heads.iter().zip(results) {
        match result {
            Ok(()) => {
                outbox::delivered(db, event.id).await?;
                metrics::counter!("tollgate_notify_delivered_total").increment(1);
                delivered += 1;
            }
            Err(failure) => {
                metrics::counter!("tollgate_notify_attempt_failures_total", "reason" => failure.reason())
                    .increment(1);
                let why = failure.describe();
                let attempts = u32::try_from(event.attempts).unwrap_or(0).saturating_add(1);
                match settings
                    .schedule
                    .after_failure(attempts, event.age(), rand::random())
                {
                    AfterFailure::RetryIn(wait) => {
                        outbox::retry_later(db, event.id, &why, wait).await?;
                        if errors.allow() {
                            tracing::warn!(
                                event_id = %event.id, account_id = event.account_id,
                                threshold = event.threshold, attempts, error = %why,
                                retry_in_ms = wait.as_millis() as u64,
                                suppressed = errors.take_suppressed(),
                                "threshold webhook not delivered; will retry"
                            );
                        }
                    }
                    AfterFailure::GiveUp => {
                        outbox::give_up(db, event.id, &why).await?;
                        metrics::counter!("tollgate_notify_failed_total").increment(1);
                        tracing::error!(
                            event_id = %event.id, account_id = event.account_id,
                            threshold = event.threshold, attempts, error = %why,
                            "threshold webhook given up after 24 hours of failures"
                        );
                    }
                }
            }
        }
    }
    Ok(delivered > 0 || heads.len() as i64 >= ROUND)
}

/// One POST of `event`, signed now.
async fn attempt(
    client: &reqwest::Client,
    webhook: &Webhook,
    event: &Pending,
) -> Result<(), Failure> {
    let body = event.body();
    let signature = signing::signature(
        webhook.secret.expose_secret().as_bytes(),
        Utc::now().timestamp(),
        &body,
    );
    let sent = client
        .post(webhook.url.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, concat!("tollgate/", env!("CARGO_PKG_VERSION")))
        .header(signing::HEADER, signature)
        .body(body)
        .send()
        .await;
    match sent {
        Ok(res) if res.status().is_success() => Ok(()),
        Ok(res) => Err(Failure::Status(res.status().as_u16())),
        Err(e) if e.is_timeout() => Err(Failure::Timeout),
        // The URL may carry a token of the receiver's: never in logs or the table.
        Err(e) => Err(Failure::Unreachable(crate::error::anyhow_chain(
            &e.without_url(),
        ))),
    }
}

async fn report_backlog(db: &PgPool, errors: &RateLimitedLog) {
    match outbox::backlog(db).await {
        Ok((pending, oldest)) => {
            metrics::gauge!("tollgate_notify_pending").set(pending as f64);
            metrics::gauge!("tollgate_notify_oldest_pending_age_seconds").set(oldest);
        }
        Err(e) => database_error("backlog", &e, errors),
    }
}

/// Finished events of months before the previous one go; the rest stay, so a
/// crossing accounted late is still known as sent.
async fn prune(db: &PgPool, errors: &RateLimitedLog) {
    let previous =
        Month::containing(Month::containing(Utc::now()).start() - chrono::Duration::days(1));
    match outbox::prune(db, previous.start()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            events = n,
            "finished threshold events of old months deleted"
        ),
        Err(e) => database_error("prune", &e, errors),
    }
}

fn zero_backlog_gauges() {
    metrics::gauge!("tollgate_notify_pending").set(0.0);
    metrics::gauge!("tollgate_notify_oldest_pending_age_seconds").set(0.0);
}

fn database_error(op: &'static str, e: &sqlx::Error, errors: &RateLimitedLog) {
    metrics::counter!("tollgate_notify_database_errors_total", "op" => op).increment(1);
    if errors.allow() {
        tracing::warn!(op, error = %e, suppressed = errors.take_suppressed(),
            "threshold webhooks: database error; retrying");
    }
}
