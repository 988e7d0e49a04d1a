//! The JetStream transport of usage events (SPEC §8, `usage_check.transport = "jetstream"`).
//!
//! Two halves, each a background task:
//! - [`publisher`] drains the in-process queue the proxy publishes into (unchanged, never
//!   waiting) into the stream, one message per event with `Nats-Msg-Id` = its
//!   transaction id, awaiting the stream's acknowledgements off the request path. While
//!   NATS does not answer, events wait in that bounded queue; a full queue drops, counted,
//!   as with the in-process transport.
//! - [`consumer`] pulls batches from the durable consumer every accounting process
//!   shares, accounts them through the accounting driver it shares with the in-process
//!   listener (`usage::driver`), and
//!   acknowledges each message only once its ledger transaction committed. A message
//!   delivered twice (its process died, an ack was lost) changes nothing the second
//!   time: the ledger's transaction id is unique.
//!
//! Messages are the events' JSON (see [`UsageEvent`]).

mod acks;
pub mod consumer;
mod lag;
pub mod publisher;

use async_nats::HeaderMap;
use bytes::Bytes;

use super::event::UsageEvent;

/// The message of one event: its JSON, and its transaction id as `Nats-Msg-Id` so that
/// a publish retried within the stream's duplicate window is stored once.
pub fn encode(event: &UsageEvent) -> (HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    headers.insert(
        async_nats::header::NATS_MESSAGE_ID,
        event.transaction_id.to_string(),
    );
    // Serializing plain fields cannot fail.
    let payload = serde_json::to_vec(event).unwrap_or_default();
    (headers, payload.into())
}

/// The event a message carries.
pub fn decode(payload: &[u8]) -> Result<UsageEvent, serde_json::Error> {
    serde_json::from_slice(payload)
}

/// Describes the transport's metrics once, for the exposition's HELP lines.
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        "tollgate_jetstream_publish_acks_total",
        "usage events the stream acknowledged (duplicate=\"true\": it already held them)"
    );
    describe_counter!(
        "tollgate_jetstream_publish_failures_total",
        "publish attempts that failed and will be retried, by reason"
    );
    describe_gauge!(
        "tollgate_jetstream_spill_depth",
        "usage events in this process not yet acknowledged by the stream (queue, in flight, retries)"
    );
    describe_gauge!(
        "tollgate_jetstream_publish_in_flight",
        "publishes awaiting the stream's acknowledgement"
    );
    describe_counter!(
        "tollgate_jetstream_messages_received_total",
        "messages pulled by this process's accounting consumer"
    );
    describe_counter!(
        "tollgate_jetstream_messages_redelivered_total",
        "messages pulled that had been delivered before (a consumer died, or an ack was lost)"
    );
    describe_counter!(
        "tollgate_jetstream_messages_acked_total",
        "messages acknowledged after their ledger transaction committed"
    );
    describe_counter!(
        "tollgate_jetstream_messages_rejected_total",
        "messages that carry no usage event, terminated without accounting"
    );
    describe_gauge!(
        "tollgate_jetstream_consumer_pending_messages",
        "messages in the stream not yet delivered to any consumer"
    );
    describe_gauge!(
        "tollgate_jetstream_consumer_ack_pending_messages",
        "messages delivered and not yet acknowledged, over the fleet"
    );
    describe_gauge!(
        "tollgate_jetstream_consumer_redelivered_messages",
        "messages delivered more than once and not yet acknowledged"
    );
    describe_gauge!(
        "tollgate_jetstream_consumer_lag_messages",
        "messages in the stream not yet accounted"
    );
    describe_gauge!(
        "tollgate_jetstream_consumer_lag_seconds",
        "age of the oldest message in the stream not yet accounted (0 when none)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_carries_the_transaction_id_and_the_event() {
        let event = UsageEvent {
            transaction_id: uuid::Uuid::new_v4(),
            account_id: 1,
            key_id: 2,
            occurred_at: chrono::Utc::now(),
            method: axum::http::Method::GET,
            route: "/western/v1/chart".into(),
            upstream_status: 503,
            cost: 1,
            reserved_by: Some(uuid::Uuid::new_v4()),
            key_reserved_by: None,
            latency_us: None,
        };
        let (headers, payload) = encode(&event);
        assert_eq!(
            headers
                .get(async_nats::header::NATS_MESSAGE_ID)
                .map(|v| v.as_str()),
            Some(event.transaction_id.to_string().as_str())
        );
        assert_eq!(decode(&payload).unwrap(), event);
        assert!(decode(b"{}").is_err());
    }
}
