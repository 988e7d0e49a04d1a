//! NATS JetStream (SPEC §8): the connection, and the stream and durable pull consumer
//! that usage events travel through.
//!
//! This module knows the topology (names, retention, acknowledgement rules) and nothing
//! of usage: `usage::jetstream` publishes and consumes through it. Both the stream and
//! the consumer are created when missing, by `tollgate migrate` and at every start; an
//! existing one is used as it is (an operator may have given it replicas or limits),
//! with a warning when it cannot serve as this module expects.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, ErrorCode};
use secrecy::ExposeSecret;

use crate::config::NatsConfig;

/// The stream's duplicate window: a publish retried within it (its acknowledgement was
/// lost, NATS restarted) is stored once. The SPEC's minimum; the server keeps one
/// entry per message of the window in memory, so longer costs memory at full rate.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Bound of every JetStream API request and publish acknowledgement.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest pause between reconnection attempts.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

/// Connects to `nats.url`. With `wait = false` the client is returned at once and
/// connects (and reconnects, for ever) in the background, so a process can start
/// while NATS is down; with `true` an unreachable server is an error.
pub async fn connect(
    config: &NatsConfig,
    name: &str,
    wait: bool,
) -> anyhow::Result<async_nats::Client> {
    let mut options = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(REQUEST_TIMEOUT)
        .reconnect_delay_callback(|attempts| {
            let ms = 50u64.saturating_mul(1 << attempts.min(10));
            Duration::from_millis(ms).min(MAX_RECONNECT_DELAY)
        })
        .event_callback(|event| async move {
            // The client logs every event itself; a lost connection deserves a warning.
            if matches!(event, async_nats::Event::Disconnected) {
                tracing::warn!("NATS disconnected; reconnecting");
            }
        });
    if !wait {
        options = options.retry_on_initial_connect();
    }
    options
        .connect(config.url.expose_secret())
        .await
        .context("cannot reach NATS at nats.url")
}

/// The JetStream context every request of this process goes through.
pub fn jetstream(client: async_nats::Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(REQUEST_TIMEOUT)
        .build(client)
}

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ensured {
    pub stream_created: bool,
    pub consumer_created: bool,
}

/// The stream and the consumer of `config`, created when missing.
pub async fn ensure(js: &jetstream::Context, config: &NatsConfig) -> anyhow::Result<Ensured> {
    let stream_created = ensure_stream(js, config).await?;
    let (_, consumer_created) = ensure_consumer(js, config).await?;
    Ok(Ensured {
        stream_created,
        consumer_created,
    })
}

/// The stream as this module creates it: a work queue (a message leaves the stream
/// once accounted and acknowledged) on disk, keeping everything until it is
/// consumed; a full disk refuses new messages rather than discarding old ones.
pub fn stream_config(config: &NatsConfig) -> stream::Config {
    stream::Config {
        name: config.stream.clone(),
        description: Some("tollgate usage events, one per paid call".into()),
        subjects: vec![config.subject.clone()],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        discard: DiscardPolicy::New,
        duplicate_window: DUPLICATE_WINDOW,
        ..Default::default()
    }
}

/// The durable pull consumer every accounting process shares: explicit acks, each
/// message acknowledged once its ledger transaction committed.
pub fn consumer_config(config: &NatsConfig) -> pull::Config {
    pull::Config {
        durable_name: Some(config.consumer.clone()),
        description: Some("tollgate accounting".into()),
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_millis(config.ack_wait_ms),
        max_ack_pending: config.max_ack_pending,
        filter_subject: config.subject.clone(),
        ..Default::default()
    }
}

/// Creates the stream when missing; `true` when this call created it.
pub async fn ensure_stream(js: &jetstream::Context, config: &NatsConfig) -> anyhow::Result<bool> {
    match js.get_stream(&config.stream).await {
        Ok(mut existing) => {
            let info = existing
                .info()
                .await
                .context("cannot read the stream's configuration")?;
            let found = &info.config;
            if !found
                .subjects
                .iter()
                .any(|s| subject_covers(s, &config.subject))
            {
                anyhow::bail!(
                    "JetStream stream {} does not take subject {} (nats.subject)",
                    config.stream,
                    config.subject
                );
            }
            if found.duplicate_window < DUPLICATE_WINDOW {
                tracing::warn!(
                    stream = %config.stream,
                    duplicate_window_s = found.duplicate_window.as_secs(),
                    "the stream's duplicate window is under 2 minutes: a retried publish may be \
                     stored twice (the ledger still accounts it once)"
                );
            }
            Ok(false)
        }
        Err(e)
            if matches!(e.kind(), GetStreamErrorKind::JetStream(ref j)
            if j.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            js.create_stream(stream_config(config))
                .await
                .with_context(|| format!("cannot create JetStream stream {}", config.stream))?;
            tracing::info!(stream = %config.stream, subject = %config.subject, "JetStream stream created");
            Ok(true)
        }
        Err(e) => Err(anyhow::Error::new(e))
            .with_context(|| format!("cannot read JetStream stream {}", config.stream)),
    }
}

/// The durable consumer, created when missing; `true` when this call created it.
pub async fn ensure_consumer(
    js: &jetstream::Context,
    config: &NatsConfig,
) -> anyhow::Result<(PullConsumer, bool)> {
    let stream = js
        .get_stream_no_info(&config.stream)
        .await
        .with_context(|| format!("cannot open JetStream stream {}", config.stream))?;
    match stream.consumer_info(&config.consumer).await {
        Ok(info) => {
            let consumer = stream
                .get_consumer(&info.name)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))
                .with_context(|| format!("cannot open JetStream consumer {}", config.consumer))?;
            Ok((consumer, false))
        }
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => {
            let consumer = stream
                .create_consumer(consumer_config(config))
                .await
                .with_context(|| format!("cannot create JetStream consumer {}", config.consumer))?;
            tracing::info!(consumer = %config.consumer, ack_wait_ms = config.ack_wait_ms,
                max_ack_pending = config.max_ack_pending, "JetStream consumer created");
            Ok((consumer, true))
        }
        Err(e) => Err(anyhow::Error::new(e))
            .with_context(|| format!("cannot read JetStream consumer {}", config.consumer)),
    }
}

/// Whether a stream subject (possibly with wildcards) takes the literal `subject`.
fn subject_covers(pattern: &str, subject: &str) -> bool {
    let mut pattern = pattern.split('.');
    let mut subject = subject.split('.');
    loop {
        match (pattern.next(), subject.next()) {
            (Some(">"), Some(_)) => return true,
            (Some(p), Some(s)) if p == "*" || p == s => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_subjects_with_wildcards_cover_literal_subjects() {
        assert!(subject_covers("tollgate.usage", "tollgate.usage"));
        assert!(subject_covers("tollgate.*", "tollgate.usage"));
        assert!(subject_covers("tollgate.>", "tollgate.usage.eu"));
        assert!(!subject_covers("tollgate.*", "tollgate.usage.eu"));
        assert!(!subject_covers("tollgate.usage", "tollgate"));
        assert!(!subject_covers("other", "tollgate.usage"));
    }

    #[test]
    fn the_stream_keeps_events_until_accounted_and_deduplicates_for_two_minutes() {
        let config = stream_config(&NatsConfig::default());
        assert_eq!(config.retention, RetentionPolicy::WorkQueue);
        assert_eq!(config.storage, StorageType::File);
        assert!(config.duplicate_window >= Duration::from_secs(120));
        let consumer = consumer_config(&NatsConfig::default());
        assert_eq!(consumer.ack_policy, AckPolicy::Explicit);
        assert_eq!(
            consumer.durable_name.as_deref(),
            Some("tollgate-accounting")
        );
    }
}
