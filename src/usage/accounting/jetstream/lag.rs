//! The consumer's lag, read from NATS into gauges by every consuming process (they all
//! report the same fleet-wide figures).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::NatsConfig;

/// How often the lag is read.
const LAG_INTERVAL: Duration = Duration::from_secs(5);

/// Reads the consumer's and the stream's state every [`LAG_INTERVAL`] into gauges.
pub(super) async fn watch(
    js: async_nats::jetstream::Context,
    nats: NatsConfig,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(LAG_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Ok(stream) = js.get_stream(&nats.stream).await else {
            continue;
        };
        let Ok(consumer) = stream.consumer_info(&nats.consumer).await else {
            continue;
        };
        let unaccounted = consumer.num_pending + consumer.num_ack_pending as u64;
        metrics::gauge!("tollgate_jetstream_consumer_pending_messages")
            .set(consumer.num_pending as f64);
        metrics::gauge!("tollgate_jetstream_consumer_ack_pending_messages")
            .set(consumer.num_ack_pending as f64);
        metrics::gauge!("tollgate_jetstream_consumer_redelivered_messages")
            .set(consumer.num_redelivered as f64);
        metrics::gauge!("tollgate_jetstream_consumer_lag_messages").set(unaccounted as f64);
        // On the work-queue stream a message leaves once acknowledged: its oldest
        // message is the oldest not yet accounted.
        let state = &stream.cached_info().state;
        let age = if unaccounted > 0 && state.messages > 0 {
            let oldest = state.first_timestamp.unix_timestamp_nanos();
            let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default() as i128;
            (now - oldest).max(0) as f64 / 1e9
        } else {
            0.0
        };
        metrics::gauge!("tollgate_jetstream_consumer_lag_seconds").set(age);
    }
}
