//! The HELP text of every metric family the gateway exposes (SPEC §22), registered once
//! with the Prometheus recorder, by name, whichever module records the family.
//!
//! A family recorded anywhere under `src/` and missing here fails
//! `every_metric_family_recorded_in_src_has_help` below; the integration test
//! `telemetry::metrics` runs `promtool check metrics` on a scrape. When you add a
//! metric, add its line here and to docs/operating.md.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

/// Counters: name and HELP text.
const COUNTERS: &[(&str, &str)] = &[
    // The public listener and the proxy.
    (
        "tollgate_http_requests_total",
        "Requests answered by the public listener, by route, method and status.",
    ),
    (
        "tollgate_upstream_errors_total",
        "Proxied calls the upstream did not answer: 502 (unreachable) and 504 (timeout), by kind.",
    ),
    (
        "tollgate_client_errors_total",
        "Proxied calls whose request body failed on the client's side (stalled or malformed), by kind.",
    ),
    (
        "tollgate_connection_timeouts_total",
        "Client connections closed by a connection bound (header read, idle), by bound.",
    ),
    (
        "tollgate_admission_total",
        "Admission decisions of the exhaustion markers and the admission hash, by outcome.",
    ),
    (
        "tollgate_auth_refused_total",
        "Requests refused for their credentials or path (unknown, revoked or expired keys, \
         out-of-scope paths, escaping paths, bad admin tokens), by reason.",
    ),
    (
        "tollgate_account_limited_total",
        "Attempts refused with 429 by the fleet's abuse limits (signup, login, redeem, admin), by kind.",
    ),
    (
        "tollgate_password_refused_total",
        "Sign-ups and sign-ins refused with 503 because too many password hashes were waiting.",
    ),
    (
        "tollgate_key_cache_total",
        "API-key cache lookups while the cache is trusted, by result (hit, miss).",
    ),
    (
        "tollgate_key_cache_listener_errors_total",
        "Losses of the API-key cache's LISTEN connection.",
    ),
    (
        "tollgate_standing_reads_total",
        "Account standings read from PostgreSQL into this replica's quota view, by source (start, call).",
    ),
    (
        "tollgate_latency_samples_dropped_total",
        "Call latencies not merged into the usage analytics because too many rollup rows were already waiting for their merge.",
    ),
    (
        "tollgate_stream_cutoffs_total",
        "Streamed responses stopped mid-stream because their usage passed a window or a spend cap, by code.",
    ),
    (
        "tollgate_quota_reservations_total",
        "Blocks of a hard plan's units this replica reserved in PostgreSQL.",
    ),
    (
        "tollgate_key_reservations_total",
        "Blocks of a limited key's units this replica reserved in PostgreSQL.",
    ),
    // Usage events and accounting.
    (
        "tollgate_usage_events_published_total",
        "Usage events queued for accounting.",
    ),
    (
        "tollgate_usage_events_dropped_total",
        "Usage events lost before the ledger (calls that will never be billed), by reason.",
    ),
    (
        "tollgate_usage_events_accounted_total",
        "Ledger rows inserted by accounting.",
    ),
    (
        "tollgate_usage_events_duplicate_total",
        "Usage events already in the ledger (redeliveries), skipped.",
    ),
    (
        "tollgate_usage_events_failed_total",
        "Usage events PostgreSQL refused even alone (never accounted).",
    ),
    (
        "tollgate_usage_listener_errors_total",
        "Failed accounting attempts, each retried.",
    ),
    (
        "tollgate_usage_paced_total",
        "Calls held (at most 20 ms) before forwarding while the usage queue was more than half full.",
    ),
    // Exhaustion markers, the fleet and Cloudflare KV.
    (
        "tollgate_markers_written_total",
        "Exhaustion markers written by this process.",
    ),
    (
        "tollgate_markers_removed_total",
        "Exhaustion markers deleted by this process.",
    ),
    (
        "tollgate_marker_listings_total",
        "KV listings made as the fleet's lister, by result (ok, failed).",
    ),
    (
        "tollgate_marker_race_removals_total",
        "Markers this process wrote and removed because PostgreSQL no longer backed them, by kind.",
    ),
    (
        "tollgate_fleet_marker_errors_total",
        "Failed reads and writes of the fleet's marker tables, by op.",
    ),
    (
        "tollgate_fleet_listener_errors_total",
        "Losses of the fleet markers' LISTEN connection.",
    ),
    (
        "tollgate_throttle_fail_open_total",
        "Calls admitted or marker operations skipped because of a failure, by reason.",
    ),
    (
        "tollgate_kv_calls_total",
        "Cloudflare KV calls that went to the network, by op and result.",
    ),
    (
        "tollgate_kv_budget_skipped_total",
        "Cloudflare KV calls refused before the network by the call budget (this process's or the fleet's), by op.",
    ),
    (
        "tollgate_kv_backoff_skipped_total",
        "Cloudflare KV calls refused locally while backing off after a 429.",
    ),
    // Payments, webhooks, metered billing.
    (
        "tollgate_billing_events_total",
        "Stripe events received with a good signature, by type and outcome.",
    ),
    (
        "tollgate_billing_signature_failures_total",
        "Stripe webhook requests refused with 400 BAD_SIGNATURE, by reason.",
    ),
    (
        "tollgate_notify_events_recorded_total",
        "Threshold events written to the webhook outbox by this process's accounting.",
    ),
    (
        "tollgate_notify_delivered_total",
        "Threshold events the webhook receiver answered 2xx to.",
    ),
    (
        "tollgate_notify_failed_total",
        "Threshold events given up after 24 hours of failed attempts.",
    ),
    (
        "tollgate_notify_attempt_failures_total",
        "Failed webhook attempts, each retried while the event is less than 24 hours old, by reason.",
    ),
    (
        "tollgate_notify_database_errors_total",
        "Database errors of the webhook delivery task (each retried), by op.",
    ),
    (
        "tollgate_meter_events_sent_total",
        "Stripe meter events accepted (each an export window).",
    ),
    (
        "tollgate_meter_units_sent_total",
        "Units carried by the Stripe meter events accepted.",
    ),
    (
        "tollgate_meter_events_failed_total",
        "Stripe meter events refused with a 4xx other than 429 (their units go out in the next window).",
    ),
    (
        "tollgate_meter_attempt_failures_total",
        "Stripe meter event attempts answered 429 or 5xx, timed out or unreachable (each retried).",
    ),
    (
        "tollgate_meter_database_errors_total",
        "Database errors of the meter exporter (each retried).",
    ),
    // The JetStream transport.
    (
        "tollgate_jetstream_publish_acks_total",
        "Usage events the stream acknowledged (duplicate=\"true\": it already held them).",
    ),
    (
        "tollgate_jetstream_publish_failures_total",
        "Failed publishes of usage events, each retried, by reason.",
    ),
    (
        "tollgate_jetstream_messages_received_total",
        "Messages pulled by this process's accounting consumer.",
    ),
    (
        "tollgate_jetstream_messages_redelivered_total",
        "Messages pulled that had been delivered before.",
    ),
    (
        "tollgate_jetstream_messages_acked_total",
        "Messages acknowledged after their ledger transaction committed.",
    ),
    (
        "tollgate_jetstream_messages_rejected_total",
        "Messages carrying no usage event, terminated without accounting.",
    ),
    // Traces.
    (
        "tollgate_trace_spans_exported_total",
        "Spans the trace collector accepted.",
    ),
    (
        "tollgate_trace_spans_dropped_total",
        "Spans never exported, by reason (queue_full, export_failed, shutdown).",
    ),
];

/// Gauges: name, unit and HELP text.
const GAUGES: &[(&str, Unit, &str)] = &[
    (
        "tollgate_connections_open",
        Unit::Count,
        "Client connections the public listener is serving.",
    ),
    (
        "tollgate_usage_queue_depth",
        Unit::Count,
        "Usage events waiting for accounting, as of the last time the queue was taken from.",
    ),
    (
        "tollgate_usage_events_set_aside",
        Unit::Count,
        "Usage events set aside while their account's row lock is held elsewhere, retried apart.",
    ),
    (
        "tollgate_marker_view_size",
        Unit::Count,
        "Exhaustion markers in this replica's view.",
    ),
    (
        "tollgate_marker_view_age_seconds",
        Unit::Seconds,
        "Age of the fleet's last good marker listing, as this replica knows it.",
    ),
    (
        "tollgate_marker_lister",
        Unit::Count,
        "1 while this process holds the marker lister's lease.",
    ),
    (
        "tollgate_marker_listing_interval_seconds",
        Unit::Seconds,
        "The interval the marker lister planned after its last listing.",
    ),
    (
        "tollgate_live_replicas",
        Unit::Count,
        "Serve replicas this one counts as live; each enforces 1/n of every rate limit per second.",
    ),
    (
        "tollgate_notify_pending",
        Unit::Count,
        "Threshold events neither delivered nor given up (reported by the delivering process).",
    ),
    (
        "tollgate_notify_oldest_pending_age_seconds",
        Unit::Seconds,
        "Age of the oldest pending threshold event (reported by the delivering process).",
    ),
    (
        "tollgate_notify_delivery_lease",
        Unit::Count,
        "1 while this process holds the webhook delivery lease.",
    ),
    (
        "tollgate_meter_oldest_unexported_age_seconds",
        Unit::Seconds,
        "Age of the oldest units in an open meter export window (reported by the exporting process).",
    ),
    (
        "tollgate_meter_export_lease",
        Unit::Count,
        "1 while this process holds the meter export lease.",
    ),
    (
        "tollgate_jetstream_spill_depth",
        Unit::Count,
        "Usage events of this process not yet acknowledged by the stream (queue, in flight, retries).",
    ),
    (
        "tollgate_jetstream_publish_in_flight",
        Unit::Count,
        "Publishes awaiting the stream's acknowledgement.",
    ),
    (
        "tollgate_jetstream_consumer_pending_messages",
        Unit::Count,
        "Messages in the stream not yet delivered to any consumer.",
    ),
    (
        "tollgate_jetstream_consumer_ack_pending_messages",
        Unit::Count,
        "Messages delivered and not yet acknowledged, over the fleet.",
    ),
    (
        "tollgate_jetstream_consumer_redelivered_messages",
        Unit::Count,
        "Messages delivered more than once and not yet acknowledged.",
    ),
    (
        "tollgate_jetstream_consumer_lag_messages",
        Unit::Count,
        "Messages in the stream not yet accounted.",
    ),
    (
        "tollgate_jetstream_consumer_lag_seconds",
        Unit::Seconds,
        "Age of the oldest message in the stream not yet accounted (0 when none).",
    ),
];

/// Histograms: name, unit and HELP text.
const HISTOGRAMS: &[(&str, Unit, &str)] = &[
    (
        "tollgate_http_request_duration_seconds",
        Unit::Seconds,
        "Time from a request's arrival to its response head, by route.",
    ),
    (
        "tollgate_upstream_duration_seconds",
        Unit::Seconds,
        "Time from sending a proxied call upstream to the upstream's response head.",
    ),
    (
        "tollgate_usage_batch_size",
        Unit::Count,
        "Usage events per accounting batch.",
    ),
    (
        "tollgate_usage_accounting_lag_seconds",
        Unit::Seconds,
        "Time from a call to the commit of its ledger row.",
    ),
];

/// Registers every family's HELP text with the installed recorder.
pub(super) fn describe_all() {
    for &(name, help) in COUNTERS {
        describe_counter!(name, Unit::Count, help);
    }
    for &(name, unit, help) in GAUGES {
        describe_gauge!(name, unit, help);
    }
    for &(name, unit, help) in HISTOGRAMS {
        describe_histogram!(name, unit, help);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    /// Every `tollgate_…` name given to `counter!`, `gauge!` or `histogram!` in `dir`.
    fn recorded_in(dir: &Path, names: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                recorded_in(&path, names);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for macro_name in ["counter!(", "gauge!(", "histogram!("] {
                for (at, _) in text.match_indices(macro_name) {
                    if text[..at].ends_with("describe_") {
                        continue;
                    }
                    let rest = text[at + macro_name.len()..].trim_start();
                    if let Some(rest) = rest.strip_prefix('"')
                        && let Some(end) = rest.find('"')
                        && rest.starts_with("tollgate_")
                    {
                        names.insert(rest[..end].to_owned());
                    }
                }
            }
        }
    }

    #[test]
    fn every_metric_family_recorded_in_src_has_help() {
        let mut recorded = BTreeSet::new();
        recorded_in(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut recorded,
        );
        assert!(recorded.len() > 50, "found only {recorded:?}");
        let described: BTreeSet<&str> = COUNTERS
            .iter()
            .map(|(name, _)| *name)
            .chain(GAUGES.iter().map(|(name, ..)| *name))
            .chain(HISTOGRAMS.iter().map(|(name, ..)| *name))
            .collect();
        let missing: Vec<_> = recorded
            .iter()
            .filter(|name| !described.contains(name.as_str()))
            .collect();
        assert!(missing.is_empty(), "no HELP text for {missing:?}");
    }

    #[test]
    fn counters_end_in_total_and_nothing_else_does() {
        for (name, _) in COUNTERS {
            assert!(name.ends_with("_total"), "{name}");
        }
        for name in GAUGES
            .iter()
            .map(|(n, ..)| n)
            .chain(HISTOGRAMS.iter().map(|(n, ..)| n))
        {
            assert!(!name.ends_with("_total"), "{name}");
        }
    }
}
