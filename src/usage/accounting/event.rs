//! Usage events and the bounded queue they travel through.
//!
//! The proxy publishes one event per upstream response with a non-blocking send. A
//! full queue drops the event with a (rate-limited) warning and a counted metric: the
//! customer's response is never changed by accounting.
//!
//! Before that point, the queue slows what comes in: while it is more than half full but
//! not full, a call waits (at most [`MAX_PACING`]) for accounting to catch up before it
//! is forwarded. A gateway whose requests outrun its accounting (the cores shared with
//! PostgreSQL, a slow disk) then serves a little slower instead of losing usage; once the
//! queue is full, accounting is not keeping up at all: calls are not held, and events are
//! dropped as above.
//!
//! Events also travel as JSON (the JetStream transport, SPEC §8), field names as below.
//! Unknown fields are ignored and every field added later must have a default, so
//! events already in a stream and processes of another version still understand each
//! other.

use std::time::Duration;

use chrono::{DateTime, Utc};
use metrics::Counter;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::telemetry::{RateLimitedLog, Registered};

/// One completed upstream call, to be accounted once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageEvent {
    /// The gateway's request UUID; the ledger's idempotency key.
    pub transaction_id: Uuid,
    pub account_id: i64,
    pub key_id: i64,
    /// Picks the UTC month the call counts in.
    pub occurred_at: DateTime<Utc>,
    #[serde(with = "method_name")]
    pub method: axum::http::Method,
    pub route: String,
    pub upstream_status: u16,
    /// Units the call costs (its route's price, or the upstream's own figure); 1 in
    /// events written before prices existed.
    #[serde(default = "one_unit")]
    pub cost: i64,
    /// The replica whose reserved units of a hard plan the call was forwarded on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_by: Option<Uuid>,
    /// The replica whose reserved units of a limited key the call was forwarded on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_reserved_by: Option<Uuid>,
    /// Microseconds from the request sent upstream to its response head (SPEC §18);
    /// none in events written before analytics existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
}

fn one_unit() -> i64 {
    1
}

/// An HTTP method as its name (`"GET"`).
mod method_name {
    use axum::http::Method;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(method: &Method, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(method.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Method, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Method::from_bytes(name.as_bytes()).map_err(D::Error::custom)
    }
}

/// Why an event was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    Queued,
    /// The queue was full; the event is lost and counted.
    DroppedFull,
    /// The listener has stopped (shutdown).
    DroppedClosed,
    /// Metering is off (local mode).
    Disabled,
}

/// Longest a call waits for room in a queue more than half full.
pub const MAX_PACING: Duration = Duration::from_millis(20);
/// How often a waiting call looks at the queue again.
const PACING_STEP: Duration = Duration::from_millis(1);

/// The sending side of the usage queue. Cheap to clone.
#[derive(Clone)]
pub struct UsagePublisher {
    tx: Option<mpsc::Sender<UsageEvent>>,
    capacity: usize,
    drop_log: std::sync::Arc<RateLimitedLog>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Creates the queue; the receiver goes to the listener.
pub fn queue(capacity: usize) -> (UsagePublisher, mpsc::Receiver<UsageEvent>) {
    let (tx, rx) = mpsc::channel(capacity);
    let publisher = UsagePublisher {
        tx: Some(tx),
        capacity,
        drop_log: Default::default(),
        dropped: Default::default(),
    };
    (publisher, rx)
}

impl UsagePublisher {
    /// Whether events are accepted at all (false with metering off).
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// A publisher that accepts nothing (metering off).
    pub fn disabled() -> Self {
        Self {
            tx: None,
            capacity: 0,
            drop_log: Default::default(),
            dropped: Default::default(),
        }
    }

    /// Events waiting for the listener.
    pub fn depth(&self) -> usize {
        self.tx
            .as_ref()
            .map_or(0, |tx| self.capacity - tx.capacity())
    }

    /// Waits while the queue is more than half full but not full, at most
    /// [`MAX_PACING`]; at once otherwise (and with metering off).
    pub async fn pace(&self) {
        let Some(tx) = &self.tx else { return };
        // Free slots below this: more than half of the queue is taken. None free: the
        // listener is not keeping up at all, and holding calls would only slow them
        // (the event is dropped, as a full queue's are).
        let half_free = self.capacity - self.capacity / 2;
        let behind = || (1..half_free).contains(&tx.capacity());
        if !behind() {
            return;
        }
        static PACED: Registered<Counter> = Registered::new();
        PACED
            .get(|| metrics::counter!("tollgate_usage_paced_total"))
            .increment(1);
        let until = tokio::time::Instant::now() + MAX_PACING;
        while behind() && tokio::time::Instant::now() < until {
            tokio::time::sleep(PACING_STEP).await;
        }
    }

    /// Events dropped because the queue was full or closed, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues `event` without waiting.
    pub fn publish(&self, event: UsageEvent) -> PublishOutcome {
        let Some(tx) = &self.tx else {
            return PublishOutcome::Disabled;
        };
        let outcome = match tx.try_send(event) {
            Ok(()) => PublishOutcome::Queued,
            Err(mpsc::error::TrySendError::Full(event)) => {
                if self.drop_log.allow() {
                    tracing::warn!(
                        account_id = event.account_id,
                        transaction_id = %event.transaction_id,
                        suppressed = self.drop_log.take_suppressed(),
                        "usage queue full: event dropped"
                    );
                }
                PublishOutcome::DroppedFull
            }
            Err(mpsc::error::TrySendError::Closed(_)) => PublishOutcome::DroppedClosed,
        };
        if matches!(
            outcome,
            PublishOutcome::DroppedFull | PublishOutcome::DroppedClosed
        ) {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        match outcome {
            PublishOutcome::Queued => {
                static PUBLISHED: Registered<Counter> = Registered::new();
                PUBLISHED
                    .get(|| metrics::counter!("tollgate_usage_events_published_total"))
                    .increment(1)
            }
            PublishOutcome::DroppedFull => {
                metrics::counter!("tollgate_usage_events_dropped_total", "reason" => "queue_full")
                    .increment(1)
            }
            PublishOutcome::DroppedClosed => {
                metrics::counter!("tollgate_usage_events_dropped_total", "reason" => "closed")
                    .increment(1)
            }
            PublishOutcome::Disabled => {}
        }
        // `tollgate_usage_queue_depth` is set by whatever drains the queue, as it takes
        // events: a gauge written by every call would be a shared write per call.
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> UsageEvent {
        UsageEvent {
            transaction_id: "00000000-0000-4000-8000-000000000000".parse().unwrap(),
            account_id: 42,
            key_id: 7,
            occurred_at: "2026-11-30T12:00:00Z".parse().unwrap(),
            method: axum::http::Method::POST,
            route: "/vedic/v1/horoscope/daily".into(),
            upstream_status: 200,
            cost: 3,
            reserved_by: None,
            key_reserved_by: None,
            latency_us: None,
        }
    }

    #[tokio::test]
    async fn a_queue_more_than_half_full_holds_calls_for_a_bounded_time() {
        use futures_util::FutureExt as _;
        let (publisher, mut rx) = queue(4);
        publisher.publish(event());
        publisher.publish(event());
        assert_eq!(
            publisher.pace().now_or_never(),
            Some(()),
            "half full: no wait"
        );
        publisher.publish(event());
        assert_eq!(
            publisher.pace().now_or_never(),
            None,
            "three of four: a wait"
        );
        let started = std::time::Instant::now();
        publisher.pace().await;
        assert!(started.elapsed() >= MAX_PACING, "{:?}", started.elapsed());
        publisher.publish(event());
        assert_eq!(publisher.pace().now_or_never(), Some(()), "full: no wait");
        rx.recv().await.unwrap();
        rx.recv().await.unwrap();
        assert_eq!(publisher.pace().now_or_never(), Some(()), "drained to half");
        assert_eq!(UsagePublisher::disabled().pace().now_or_never(), Some(()));
    }

    #[test]
    fn events_travel_as_readable_json() {
        let json = serde_json::to_value(event()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "transaction_id": "00000000-0000-4000-8000-000000000000",
                "account_id": 42,
                "key_id": 7,
                "occurred_at": "2026-11-30T12:00:00Z",
                "method": "POST",
                "route": "/vedic/v1/horoscope/daily",
                "upstream_status": 200,
                "cost": 3
            })
        );
        assert_eq!(serde_json::from_value::<UsageEvent>(json).unwrap(), event());
    }

    #[test]
    fn fields_of_a_newer_version_are_ignored() {
        let mut json = serde_json::to_value(event()).unwrap();
        json["surcharge"] = 3.into();
        assert_eq!(serde_json::from_value::<UsageEvent>(json).unwrap(), event());
    }

    #[test]
    fn an_event_from_before_prices_costs_one_unit() {
        let mut json = serde_json::to_value(event()).unwrap();
        json.as_object_mut().unwrap().remove("cost");
        assert_eq!(serde_json::from_value::<UsageEvent>(json).unwrap().cost, 1);
    }
}
