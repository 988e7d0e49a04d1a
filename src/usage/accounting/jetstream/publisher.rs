//! The publisher: drains the in-process usage queue into the JetStream stream.
//!
//! Up to `nats.publish_concurrency` publishes await their acknowledgement at once. A
//! failed publish (NATS down or slow, the stream missing) is kept and retried; after a
//! failure one publish at a time probes NATS, the window doubling with each success,
//! so an outage costs one doomed publish per back-off instead of hundreds. Meanwhile
//! nothing more is taken from the queue: events wait there, bounded, and the proxy's
//! non-blocking publish drops (counted) only once it is full. Shutdown publishes what
//! is queued within `usage_check.drain_timeout_ms`.

use std::collections::VecDeque;
use std::time::Duration;

use async_nats::jetstream::context::{PublishAckFuture, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use metrics::Counter;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::NatsConfig;
use crate::telemetry::{RateLimitedLog, Registered};
use crate::usage::accounting::event::UsageEvent;

/// First pause after a failed publish; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How often a disconnected client is looked at again.
const DISCONNECTED_RECHECK: Duration = Duration::from_millis(50);

/// How often the queue is looked at while publishes are in flight.
const QUEUE_POLL: Duration = Duration::from_millis(1);

/// How often the gauges are set while publishes are in flight.
const GAUGE_INTERVAL: Duration = Duration::from_millis(250);

/// How the publisher runs.
#[derive(Debug, Clone)]
pub struct PublisherSettings {
    pub nats: NatsConfig,
    /// Bound of the shutdown drain.
    pub drain_timeout: Duration,
}

type Attempt = BoxFuture<'static, (UsageEvent, Result<PublishAck, PublishErrorKind>)>;

/// Runs until `stop` fires, then publishes what is left within the drain bound.
pub async fn run(
    js: async_nats::jetstream::Context,
    mut rx: mpsc::Receiver<UsageEvent>,
    settings: PublisherSettings,
    stop: CancellationToken,
) {
    let mut relay = Relay::new(js, settings.nats);
    relay.pump(&mut rx, Some(&stop)).await;

    rx.close();
    let deadline = Instant::now() + settings.drain_timeout;
    if tokio::time::timeout_at(deadline, relay.pump(&mut rx, None))
        .await
        .is_err()
    {
        let lost = rx.len() + relay.retry.len() + relay.in_flight.len();
        metrics::counter!("tollgate_usage_events_dropped_total", "reason" => "shutdown")
            .increment(lost as u64);
        // An upper bound: a publish cut off mid-way may have reached the stream.
        tracing::error!(
            at_most = lost,
            "usage events not published to JetStream before the shutdown deadline: events lost"
        );
    } else {
        tracing::info!("usage queue drained into JetStream");
    }
    relay.record(0);
}

struct Relay {
    js: async_nats::jetstream::Context,
    nats: NatsConfig,
    in_flight: FuturesUnordered<Attempt>,
    /// Events whose publish failed, published again before anything new.
    retry: VecDeque<UsageEvent>,
    /// Publishes allowed in flight now: 1 after a failure, doubling up to the maximum.
    window: usize,
    backoff: Duration,
    /// No publish starts before this instant (after a failure).
    paused_until: Option<Instant>,
    /// The stream was missing: create it before publishing again.
    stream_missing: bool,
    failure_log: RateLimitedLog,
}

impl Relay {
    fn new(js: async_nats::jetstream::Context, nats: NatsConfig) -> Self {
        let window = nats.publish_concurrency.max(1);
        Self {
            js,
            nats,
            in_flight: FuturesUnordered::new(),
            retry: VecDeque::new(),
            window,
            backoff: MIN_BACKOFF,
            paused_until: None,
            stream_missing: false,
            failure_log: RateLimitedLog::default(),
        }
    }

    /// Publishes until `stop` fires, or (without `stop`) until the queue is closed and
    /// every event in it acknowledged.
    ///
    /// While publishes are in flight the queue is looked at when one is acknowledged
    /// and every [`QUEUE_POLL`], not waited on: a waiting receiver is woken by every
    /// event sent, each wake a system call on the request's thread. The gauges are set
    /// every [`GAUGE_INTERVAL`] meanwhile, and whenever nothing is in flight.
    async fn pump(
        &mut self,
        rx: &mut mpsc::Receiver<UsageEvent>,
        stop: Option<&CancellationToken>,
    ) {
        let never = CancellationToken::new();
        let stop = stop.unwrap_or(&never);
        let mut closed = false;
        let mut poll = tokio::time::interval(QUEUE_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut gauges_set = Instant::now();
        loop {
            self.launch_retries().await;
            if self.in_flight.is_empty() || gauges_set.elapsed() >= GAUGE_INTERVAL {
                self.record(rx.len());
                gauges_set = Instant::now();
            }
            if closed && self.retry.is_empty() && self.in_flight.is_empty() {
                return;
            }
            let room = self.has_room() && self.retry.is_empty() && !closed;
            let waiting = self.in_flight.is_empty();
            let resume = self.paused_until;
            tokio::select! {
                _ = stop.cancelled() => return,
                Some((event, result)) = self.in_flight.next(), if !waiting => {
                    self.settle(event, result);
                    if room {
                        closed = self.take_queued(rx);
                    }
                }
                event = rx.recv(), if room && waiting => match event {
                    Some(event) => {
                        self.start(event);
                        closed = self.take_queued(rx);
                    }
                    None => closed = true,
                },
                _ = poll.tick(), if room && !waiting => closed = self.take_queued(rx),
                _ = tokio::time::sleep_until(resume.unwrap_or_else(Instant::now)), if resume.is_some() => {
                    self.paused_until = None;
                }
            }
        }
    }

    /// Starts what is queued, as far as the window allows, without waiting; whether the
    /// queue is closed and empty.
    fn take_queued(&mut self, rx: &mut mpsc::Receiver<UsageEvent>) -> bool {
        while self.retry.is_empty() && self.has_room() {
            match rx.try_recv() {
                Ok(event) => self.start(event),
                Err(mpsc::error::TryRecvError::Empty) => return false,
                Err(mpsc::error::TryRecvError::Disconnected) => return true,
            }
        }
        false
    }

    /// Whether another publish may start now.
    fn has_room(&mut self) -> bool {
        if self.paused_until.is_some() || self.in_flight.len() >= self.window {
            return false;
        }
        if self.js.client().connection_state() != async_nats::connection::State::Connected {
            // Publishing now would only queue commands for a connection that is not there.
            self.paused_until = Some(Instant::now() + DISCONNECTED_RECHECK);
            return false;
        }
        true
    }

    /// Starts the retries the window allows (creating the stream first if it was missing).
    async fn launch_retries(&mut self) {
        if self.retry.is_empty() || !self.has_room() {
            return;
        }
        if self.stream_missing {
            match crate::nats::ensure_stream(&self.js, &self.nats).await {
                Ok(_) => self.stream_missing = false,
                Err(e) => {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        "cannot create the JetStream stream"
                    );
                    self.pause();
                    return;
                }
            }
        }
        while self.has_room() {
            let Some(event) = self.retry.pop_front() else {
                break;
            };
            self.start(event);
        }
    }

    fn start(&mut self, event: UsageEvent) {
        let js = self.js.clone();
        let subject = self.nats.subject.clone();
        self.in_flight.push(Box::pin(async move {
            let (headers, payload) = super::encode(&event);
            let sent: Result<PublishAckFuture, _> =
                js.publish_with_headers(subject, headers, payload).await;
            let acked = match sent {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            (event, acked.map_err(|e| e.kind()))
        }));
    }

    fn settle(&mut self, event: UsageEvent, result: Result<PublishAck, PublishErrorKind>) {
        match result {
            Ok(ack) => {
                static FIRST: Registered<Counter> = Registered::new();
                static DUPLICATE: Registered<Counter> = Registered::new();
                let acks = if ack.duplicate {
                    DUPLICATE.get(|| {
                        metrics::counter!("tollgate_jetstream_publish_acks_total", "duplicate" => "true")
                    })
                } else {
                    FIRST.get(|| {
                        metrics::counter!("tollgate_jetstream_publish_acks_total", "duplicate" => "false")
                    })
                };
                acks.increment(1);
                self.backoff = MIN_BACKOFF;
                self.window = (self.window * 2).min(self.nats.publish_concurrency.max(1));
            }
            Err(kind) => {
                let reason = match kind {
                    PublishErrorKind::TimedOut => "timeout",
                    PublishErrorKind::StreamNotFound => "no_stream",
                    PublishErrorKind::BrokenPipe => "disconnected",
                    _ => "other",
                };
                metrics::counter!("tollgate_jetstream_publish_failures_total", "reason" => reason)
                    .increment(1);
                if self.failure_log.allow() {
                    tracing::warn!(
                        reason,
                        error = %kind,
                        suppressed = self.failure_log.take_suppressed(),
                        "publishing a usage event to JetStream failed; it waits and is retried"
                    );
                }
                self.stream_missing |= kind == PublishErrorKind::StreamNotFound;
                self.retry.push_back(event);
                self.window = 1;
                self.pause();
            }
        }
    }

    fn pause(&mut self) {
        self.paused_until = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    fn record(&self, queued: usize) {
        let in_flight = self.in_flight.len();
        metrics::gauge!("tollgate_usage_queue_depth").set(queued as f64);
        metrics::gauge!("tollgate_jetstream_publish_in_flight").set(in_flight as f64);
        metrics::gauge!("tollgate_jetstream_spill_depth")
            .set((queued + in_flight + self.retry.len()) as f64);
    }
}
