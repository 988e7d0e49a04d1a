//! Acknowledging pulled messages: `+ACK` once an event is settled, `+WPI` (in
//! progress) while it is being accounted, `-NAK` to give one back, `+TERM` for a message
//! that can never be accounted. They travel like any publish, fire and forget: one that
//! is lost means a redelivery, which accounts nothing twice.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::Subject;
use async_nats::jetstream::AckKind;
use bytes::Bytes;
use uuid::Uuid;

use crate::telemetry::RateLimitedLog;

/// Where to acknowledge one delivered message, and the transaction id it carried.
pub(super) struct Delivery {
    pub transaction_id: Uuid,
    pub reply: Subject,
}

/// Awaits `work`, telling JetStream every third of `ack_wait` that `deliveries` are
/// still being worked on, so they are not handed to another consumer meanwhile.
pub(super) async fn keep_alive<T>(
    acks: &Acks,
    deliveries: &[Delivery],
    ack_wait: Duration,
    work: impl Future<Output = T>,
) -> T {
    let mut work = std::pin::pin!(work);
    let every = (ack_wait / 3).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = tokio::time::sleep(every) => acks.send(AckKind::Progress, deliveries).await,
        }
    }
}

/// Sends acknowledgements.
#[derive(Clone)]
pub(super) struct Acks {
    client: async_nats::Client,
    log: Arc<RateLimitedLog>,
}

impl Acks {
    pub(super) fn new(client: async_nats::Client) -> Self {
        Self {
            client,
            log: Default::default(),
        }
    }

    pub(super) async fn send(&self, kind: AckKind, deliveries: &[Delivery]) {
        let body: Bytes = kind.into();
        for delivery in deliveries {
            if let Err(e) = self
                .client
                .publish(delivery.reply.clone(), body.clone())
                .await
                && self.log.allow()
            {
                tracing::warn!(error = %e, suppressed = self.log.take_suppressed(),
                    "acknowledging a JetStream message failed; it will be redelivered");
            }
        }
        if matches!(kind, AckKind::Ack) {
            metrics::counter!("tollgate_jetstream_messages_acked_total")
                .increment(deliveries.len() as u64);
        }
    }

    /// Pushes buffered acknowledgements to the server (bounded).
    pub(super) async fn flush(&self) {
        let _ = tokio::time::timeout(crate::nats::REQUEST_TIMEOUT, self.client.flush()).await;
    }
}
