//! Logs, metrics and traces.
//!
//! `tracing` with a text or JSON formatter; Prometheus metrics through the `metrics`
//! facade, rendered on the metrics listener only, every family with its HELP text
//! ([`help`]). [`RateLimitedLog`] keeps a failing dependency from turning every request
//! into a log line. Span fields are formatted only once a line inside the span is logged
//! ([`deferred`]). Traces of calls go to an OTLP/HTTP collector when one is configured
//! ([`traces`], [`export`]). A reload may replace the log filter ([`log_filter`]).

mod deferred;
mod export;
mod help;
mod log_filter;
pub mod traces;

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogConfig, LogFormat};
use log_filter::{LiveFilter, LogFilter};
pub use log_filter::{NextLogFilter, filter_from_env, next_log_filter};

/// Installs the global tracing subscriber. Later calls do nothing. Its filter is
/// `RUST_LOG` when set and valid, else `log.filter`; a reload may replace the latter
/// ([`next_log_filter`]).
pub fn init_tracing(config: &LogConfig) {
    let from_env = std::env::var(EnvFilter::DEFAULT_ENV)
        .ok()
        .filter(|d| !d.trim().is_empty());
    let env_filter = from_env
        .as_deref()
        .and_then(|d| LogFilter::parse_or_warn(EnvFilter::DEFAULT_ENV, d));
    let rust_log = env_filter.is_some();
    let filter = env_filter
        .or_else(|| LogFilter::parse_or_warn("log.filter", &config.filter))
        .unwrap_or_else(LogFilter::info);
    let live = LiveFilter::new(filter);
    let registry = tracing_subscriber::registry().with(live.clone());
    let result = match config.format {
        LogFormat::Json => registry
            .with(deferred::Deferred::new(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false),
            ))
            .try_init(),
        // Colour codes only for a terminal: a log file or collector gets plain text.
        LogFormat::Text => registry
            .with(deferred::Deferred::new(
                tracing_subscriber::fmt::layer().with_ansi(std::io::stdout().is_terminal()),
            ))
            .try_init(),
    };
    if result.is_ok() {
        log_filter::installed(live, rust_log, &config.filter);
    }
}

static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process-wide Prometheus recorder, installed on first use.
pub fn prometheus() -> PrometheusHandle {
    PROMETHEUS
        .get_or_init(|| {
            let latency = &[
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0,
            ];
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), latency)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("tollgate_usage_batch_size".into()),
                        &[1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0],
                    )
                })
                .expect("bucket lists are not empty");
            let handle = builder
                .install_recorder()
                .expect("no other metrics recorder is installed");
            help::describe_all();
            let upkeep = handle.clone();
            // Histograms drain into the exposition only on upkeep.
            std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(Duration::from_secs(5));
                        upkeep.run_upkeep();
                    }
                })
                .expect("thread spawns");
            handle
        })
        .clone()
}

/// Whether the Prometheus recorder is installed (metric handles taken now are live).
pub fn recorder_installed() -> bool {
    PROMETHEUS.get().is_some()
}

/// A metric handle registered once, for a hot path: `metrics::counter!` and friends
/// look the series up by name and labels (building and hashing its key) on every use.
/// Nothing is kept before the Prometheus recorder is installed, since a handle taken
/// earlier would record nowhere for good.
pub struct Registered<T>(OnceLock<T>);

impl<T: Clone> Registered<T> {
    pub const fn new() -> Self {
        Self(OnceLock::new())
    }

    /// The handle, registered by `register` the first time.
    pub fn get(&'static self, register: impl FnOnce() -> T) -> Cow<'static, T> {
        if let Some(handle) = self.0.get() {
            return Cow::Borrowed(handle);
        }
        if PROMETHEUS.get().is_none() {
            return Cow::Owned(register());
        }
        Cow::Borrowed(self.0.get_or_init(register))
    }
}

impl<T: Clone> Default for Registered<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Lets one log line through per interval and counts the ones it held back.
#[derive(Debug)]
pub struct RateLimitedLog {
    interval: Duration,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last line let through, plus one (0 = never).
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl Default for RateLimitedLog {
    fn default() -> Self {
        Self::new(Duration::from_secs(10))
    }
}

impl RateLimitedLog {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether to log now.
    pub fn allow(&self) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < self.interval.as_millis() as u64 {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// How many lines were held back since the last one let through.
    pub fn take_suppressed(&self) -> u64 {
        self.suppressed.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_line_of_a_burst_is_logged() {
        let log = RateLimitedLog::new(Duration::from_secs(60));
        assert!(log.allow());
        assert!(!log.allow());
        assert!(!log.allow());
        assert_eq!(log.take_suppressed(), 2);
    }
}
