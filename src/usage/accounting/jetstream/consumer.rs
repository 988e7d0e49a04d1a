//! The accounting consumer: pulls batches from the durable consumer, accounts them, and
//! acknowledges each message once its ledger transaction committed.
//!
//! Batches form as in the in-process listener (up to `usage_check.batch_size`, waiting
//! `batch_linger_ms` after the first message), up to `concurrent_batches` are accounted
//! at once through the driver shared with the in-process listener (`usage::driver`: outages
//! wait, refusals are retried and split, locked accounts set aside). While a batch is
//! being accounted its messages are kept from redelivery with progress acks; events
//! set aside are acknowledged when they are settled. A process that dies before
//! acknowledging leaves its messages to be redelivered after `nats.ack_wait_ms`, to
//! whichever process pulls next; accounting them again changes nothing.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::pull;
use futures_util::StreamExt as _;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::acks::{Acks, Delivery, keep_alive};
use crate::config::NatsConfig;
use crate::telemetry::RateLimitedLog;
use crate::usage::accounting::driver::{
    Deferred, ListenerSettings, SET_ASIDE_CAPACITY, SetAside, account_guarded,
};
use crate::usage::accounting::event::UsageEvent;
use crate::usage::accounting::ledger::Accountant;

/// Idle heartbeat asked of the server while pulling: two missed ones end the pull.
const PULL_HEARTBEAT: Duration = Duration::from_secs(5);

/// First pause before binding to the consumer again after a failure; doubles up to the max.
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long a message given back (`-NAK`) waits before it is delivered again.
const REDELIVERY_DELAY: Duration = Duration::from_secs(1);

/// How the consumer runs.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub nats: NatsConfig,
    /// Batch size and linger, batches at once, account lanes, drain bound.
    pub batching: ListenerSettings,
}

/// Runs until `stop` fires, then lets the batches being accounted finish within the
/// drain bound (what does not finish is redelivered after `ack_wait`).
pub async fn run(
    accountant: Accountant,
    js: async_nats::jetstream::Context,
    settings: ConsumerSettings,
    stop: CancellationToken,
) {
    let batching = settings.batching;
    let ack_wait = Duration::from_millis(settings.nats.ack_wait_ms);
    let acks = Acks::new(js.client());
    let set_aside = SetAside::new(SET_ASIDE_CAPACITY);
    let deferred_acks = TaskTracker::new();
    let mut in_flight: JoinSet<()> = JoinSet::new();
    let lag = tokio::spawn(super::lag::watch(
        js.clone(),
        settings.nats.clone(),
        stop.clone(),
    ));
    let errors = RateLimitedLog::default();
    // A batch that filled before its linger ran out means a backlog: the next may be
    // twice as large, up to `max_batch`; one that did not goes back to `batch_size`.
    let mut size = batching.batch_size.max(1);

    'bind: while let Some(mut messages) =
        bind_retrying(&js, &settings.nats, batching.batch_size, &errors, &stop).await
    {
        loop {
            while in_flight.len() >= batching.concurrent_batches.max(1) {
                tokio::select! {
                    _ = in_flight.join_next() => {}
                    _ = stop.cancelled() => break 'bind,
                }
            }
            let (batch, ended) = tokio::select! {
                _ = stop.cancelled() => break 'bind,
                pulled = next_batch(&mut messages, size, &batching, &acks, &errors) => pulled,
            };
            size = if batch.len() >= size {
                batching.batch_for(size * 2)
            } else {
                batching.batch_for(0)
            };
            if !batch.is_empty() {
                metrics::histogram!("tollgate_usage_batch_size").record(batch.len() as f64);
                in_flight.spawn(account_batch(
                    accountant.clone(),
                    batch,
                    batching.account_lanes,
                    set_aside.clone(),
                    deferred_acks.clone(),
                    acks.clone(),
                    ack_wait,
                ));
            }
            if ended {
                continue 'bind;
            }
        }
    }

    drain(
        in_flight,
        &set_aside,
        &deferred_acks,
        batching.drain_timeout,
    )
    .await;
    acks.flush().await;
    let _ = lag.await;
    tracing::info!("JetStream accounting consumer stopped");
}

/// The consumer's pull stream, bound again (with back-off) until it works; `None` once
/// `stop` fires.
async fn bind_retrying(
    js: &async_nats::jetstream::Context,
    nats: &NatsConfig,
    batch_size: usize,
    errors: &RateLimitedLog,
    stop: &CancellationToken,
) -> Option<pull::Stream> {
    let mut backoff = MIN_BACKOFF;
    while !stop.is_cancelled() {
        let bound = tokio::select! {
            _ = stop.cancelled() => return None,
            bound = bind(js, nats, batch_size) => bound,
        };
        match bound {
            Ok(messages) => return Some(messages),
            Err(e) => {
                if errors.allow() {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        suppressed = errors.take_suppressed(),
                        "cannot pull from the JetStream consumer; retrying"
                    );
                }
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    None
}

/// Lets the batches in flight, the set-aside events and the deferred acknowledgements
/// finish within `timeout`; what is still unaccounted then is redelivered by NATS.
async fn drain(
    mut in_flight: JoinSet<()>,
    set_aside: &SetAside,
    deferred_acks: &TaskTracker,
    timeout: Duration,
) {
    let drained = tokio::time::timeout(timeout, async {
        while in_flight.join_next().await.is_some() {}
        set_aside.settle().await;
        deferred_acks.close();
        deferred_acks.wait().await;
    })
    .await;
    if drained.is_err() {
        in_flight.abort_all();
        tracing::warn!(
            "usage batches still being accounted at the shutdown deadline: their messages are \
             redelivered after nats.ack_wait_ms"
        );
    }
}

/// The consumer's message stream, the stream and consumer created first when missing.
async fn bind(
    js: &async_nats::jetstream::Context,
    nats: &NatsConfig,
    batch_size: usize,
) -> anyhow::Result<pull::Stream> {
    crate::nats::ensure_stream(js, nats).await?;
    let (consumer, _) = crate::nats::ensure_consumer(js, nats).await?;
    let messages = consumer
        .stream()
        .max_messages_per_batch(batch_size.max(1))
        .heartbeat(PULL_HEARTBEAT)
        .messages()
        .await?;
    Ok(messages)
}

/// One pulled event and where to acknowledge it.
struct Pulled {
    event: UsageEvent,
    delivery: Delivery,
}

/// The next batch: waits for a first message, then takes what arrives within the
/// linger, up to `size`. `true` when the pull ended (an error, NATS gone) and
/// the consumer must be bound again.
async fn next_batch(
    messages: &mut pull::Stream,
    size: usize,
    settings: &ListenerSettings,
    acks: &Acks,
    errors: &RateLimitedLog,
) -> (Vec<Pulled>, bool) {
    let mut batch = Vec::with_capacity(size);
    let mut until = None;
    while batch.len() < size {
        let next = match until {
            None => messages.next().await,
            Some(until) => tokio::select! {
                biased;
                next = messages.next() => next,
                _ = tokio::time::sleep_until(until) => break,
            },
        };
        match next {
            Some(Ok(message)) => {
                if let Some(pulled) = receive(message, acks).await {
                    batch.push(pulled);
                    until.get_or_insert_with(|| Instant::now() + settings.batch_linger);
                }
            }
            Some(Err(e)) => {
                if errors.allow() {
                    tracing::warn!(error = %e, suppressed = errors.take_suppressed(),
                        "pulling from the JetStream consumer failed; binding again");
                }
                return (batch, true);
            }
            None => return (batch, true),
        }
    }
    (batch, false)
}

/// The event of a delivered message; a message that carries none is terminated.
async fn receive(message: async_nats::jetstream::Message, acks: &Acks) -> Option<Pulled> {
    metrics::counter!("tollgate_jetstream_messages_received_total").increment(1);
    if message.info().is_ok_and(|info| info.delivered > 1) {
        metrics::counter!("tollgate_jetstream_messages_redelivered_total").increment(1);
    }
    let async_nats::jetstream::Message { message, .. } = message;
    let reply = message.reply.clone()?;
    match super::decode(&message.payload) {
        Ok(event) => Some(Pulled {
            delivery: Delivery {
                transaction_id: event.transaction_id,
                reply,
            },
            event,
        }),
        Err(e) => {
            metrics::counter!("tollgate_jetstream_messages_rejected_total").increment(1);
            tracing::error!(error = %e, subject = %message.subject,
                "a JetStream message carries no usage event; terminated");
            acks.send(
                AckKind::Term,
                &[Delivery {
                    transaction_id: Uuid::nil(),
                    reply,
                }],
            )
            .await;
            None
        }
    }
}

/// Accounts one batch and acknowledges its messages as their events are settled.
async fn account_batch(
    accountant: Accountant,
    batch: Vec<Pulled>,
    lanes: usize,
    set_aside: SetAside,
    deferred_acks: TaskTracker,
    acks: Acks,
    ack_wait: Duration,
) {
    let (mut events, deliveries): (Vec<UsageEvent>, Vec<Delivery>) =
        batch.into_iter().map(|p| (p.event, p.delivery)).unzip();
    let accounting = account_guarded(&accountant, &mut events, lanes, &set_aside);
    let Some(deferred) = keep_alive(&acks, &deliveries, ack_wait, accounting).await else {
        // A bug, not a database error: counted and not retried, as in the listener.
        acks.send(AckKind::Term, &deliveries).await;
        return;
    };
    if deferred.is_empty() {
        acks.send(AckKind::Ack, &deliveries).await;
        return;
    }
    let owner: HashMap<Uuid, usize> = deferred
        .iter()
        .enumerate()
        .flat_map(|(i, d)| d.transaction_ids.iter().map(move |id| (*id, i)))
        .collect();
    let mut now = Vec::new();
    let mut later: Vec<Vec<Delivery>> = deferred.iter().map(|_| Vec::new()).collect();
    for delivery in deliveries {
        match owner.get(&delivery.transaction_id) {
            Some(&i) => later[i].push(delivery),
            None => now.push(delivery),
        }
    }
    acks.send(AckKind::Ack, &now).await;
    for (Deferred { settled, .. }, group) in deferred.into_iter().zip(later) {
        let acks = acks.clone();
        deferred_acks.spawn(async move {
            let kind = match keep_alive(&acks, &group, ack_wait, settled).await {
                Ok(()) => AckKind::Ack,
                // Not accounted by this process (no room to set them aside):
                // back to the stream, delivered again after a pause.
                Err(_) => AckKind::Nak(Some(REDELIVERY_DELAY)),
            };
            acks.send(kind, &group).await;
        });
    }
}
