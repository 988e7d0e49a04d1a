//! Traces and metrics conventions (SPEC §22): spans as a collector receives them from the
//! real gateway (`traces`), and the metrics exposition as `promtool` reads it (`metrics`).

mod collector;
mod metrics;
mod traces;

use tollgate::config::Config;

use crate::common::{TestApp, spawn_app_with};
use collector::Collector;

/// A gateway exporting its traces to `collector`, sampling `ratio` of new traces.
async fn traced_app(
    collector: &Collector,
    ratio: f64,
    adjust: impl FnOnce(&mut Config),
) -> TestApp {
    spawn_app_with(|c| {
        c.telemetry.otlp_endpoint = Some(collector.endpoint());
        c.telemetry.sample_ratio = ratio;
        adjust(c);
    })
    .await
}
