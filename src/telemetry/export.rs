//! Where ended spans go: a bounded queue that never holds a call back, and a task that
//! posts what it holds to the collector over OTLP/HTTP (protobuf), in batches.
//!
//! A span is queued with `try_send` on the thread that ends it; a full queue drops it,
//! counted in `tollgate_trace_spans_dropped_total{reason="queue_full"}`. The task sends
//! a batch every [`SCHEDULED_DELAY`], or as soon as a batch's worth is waiting, one
//! request at a time; a batch the collector refuses or never answers is dropped
//! (`reason="export_failed"`), never retried, so a dead collector costs the gateway a
//! failed request per batch and nothing more. The SDK's own batch processor does the
//! same on a thread of its own, but keeps its drop count to itself.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _, SpanProcessor};
use tokio::sync::Notify;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::RateLimitedLog;

/// Spans waiting to be sent, at most.
const QUEUE_CAPACITY: usize = 4096;
/// Spans in one request to the collector, at most.
const MAX_BATCH: usize = 512;
/// How long a span waits for its batch, at most, while fewer than a batch's worth wait.
const SCHEDULED_DELAY: Duration = Duration::from_secs(1);
/// How long one request to the collector may take, connecting included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to the collector may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long shutdown waits for the spans still queued to be sent.
const FINAL_FLUSH: Duration = Duration::from_secs(3);

/// The resource every span of this process belongs to: `service.name = "tollgate"`,
/// `service.version` = this binary's, and whatever `OTEL_RESOURCE_ATTRIBUTES` adds.
pub(super) fn resource() -> Resource {
    Resource::builder()
        .with_service_name("tollgate")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The span processor that queues ended spans for `url`, and the task that sends them
/// until `stop`.
pub(super) fn start(
    url: &str,
    stop: CancellationToken,
) -> anyhow::Result<(QueuedExport, JoinHandle<()>)> {
    let http = reqwest::Client::builder()
        .timeout(EXPORT_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(http)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()?;
    exporter.set_resource(&resource());
    let (queue, spans) = mpsc::channel(QUEUE_CAPACITY);
    let wake = Arc::new(Notify::new());
    let task = tokio::spawn(send_batches(spans, exporter, wake.clone(), stop));
    Ok((QueuedExport { queue, wake }, task))
}

/// Queues ended spans for [`send_batches`].
#[derive(Debug)]
pub(super) struct QueuedExport {
    queue: mpsc::Sender<SpanData>,
    wake: Arc<Notify>,
}

impl SpanProcessor for QueuedExport {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.queue.try_send(span) {
            Ok(()) => {
                if self.queue.capacity() <= QUEUE_CAPACITY - MAX_BATCH {
                    self.wake.notify_one();
                }
            }
            Err(TrySendError::Full(_)) => dropped("queue_full", 1),
            Err(TrySendError::Closed(_)) => dropped("shutdown", 1),
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.wake.notify_one();
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        // The sending task stops with the gateway (its `stop` token).
        Ok(())
    }
}

fn dropped(reason: &'static str, spans: usize) {
    if spans == 0 {
        return;
    }
    metrics::counter!("tollgate_trace_spans_dropped_total", "reason" => reason)
        .increment(spans as u64);
}

/// Sends the queued spans in batches until `stop`, then what is still queued (within
/// [`FINAL_FLUSH`]).
async fn send_batches(
    mut spans: mpsc::Receiver<SpanData>,
    exporter: opentelemetry_otlp::SpanExporter,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    'sending: loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = wake.notified() => {}
            _ = tokio::time::sleep(SCHEDULED_DELAY) => {}
        }
        while let Some(batch) = next_batch(&mut spans) {
            let count = batch.len();
            // A collector that never answers holds no shutdown for its timeout.
            tokio::select! {
                _ = send(&exporter, batch, None) => {}
                _ = stop.cancelled() => {
                    dropped("shutdown", count);
                    break 'sending;
                }
            }
        }
    }
    // Spans ended from now on are counted as dropped at shutdown.
    spans.close();
    let deadline = tokio::time::Instant::now() + FINAL_FLUSH;
    while let Some(batch) = next_batch(&mut spans) {
        if !send(&exporter, batch, Some(deadline)).await {
            let mut left = 0;
            while spans.try_recv().is_ok() {
                left += 1;
            }
            dropped("shutdown", left);
            return;
        }
    }
}

/// Up to [`MAX_BATCH`] of the queued spans; `None` when none is queued.
fn next_batch(spans: &mut mpsc::Receiver<SpanData>) -> Option<Vec<SpanData>> {
    let mut batch = Vec::new();
    while batch.len() < MAX_BATCH
        && let Ok(span) = spans.try_recv()
    {
        batch.push(span);
    }
    (!batch.is_empty()).then_some(batch)
}

/// Posts one batch (by `deadline`, when given); whether the collector took it.
async fn send(
    exporter: &opentelemetry_otlp::SpanExporter,
    batch: Vec<SpanData>,
    deadline: Option<tokio::time::Instant>,
) -> bool {
    static LOG: LazyLock<RateLimitedLog> = LazyLock::new(RateLimitedLog::default);
    let count = batch.len();
    let sent = exporter.export(batch);
    let result = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, sent)
            .await
            .unwrap_or(Err(OTelSdkError::Timeout(FINAL_FLUSH))),
        None => sent.await,
    };
    match result {
        Ok(()) => {
            metrics::counter!("tollgate_trace_spans_exported_total").increment(count as u64);
            true
        }
        Err(e) => {
            dropped("export_failed", count);
            if LOG.allow() {
                tracing::warn!(
                    spans = count,
                    error = %e,
                    suppressed = LOG.take_suppressed(),
                    "trace export failed; the batch is dropped"
                );
            }
            false
        }
    }
}
