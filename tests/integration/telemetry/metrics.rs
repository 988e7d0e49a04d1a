//! The metrics exposition as Prometheus's own linter reads it: after the main paths have
//! run (customers, keys, proxied calls and refusals, accounting, the admin API, trace
//! export), `promtool check metrics` on a scrape of the metrics listener reports nothing.
//! promtool comes with Debian's `prometheus` package (scripts/ensure-promtool.sh).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::collector::Collector;
use super::traced_app;

fn promtool() -> String {
    std::env::var("PROMTOOL")
        .ok()
        .into_iter()
        .chain(["/usr/bin/promtool".to_owned()])
        .find(|path| Path::new(path).exists())
        .unwrap_or_else(|| panic!("no /usr/bin/promtool here: run scripts/ensure-promtool.sh"))
}

/// What `promtool check metrics` says of `exposition`, and whether it passed.
fn check_metrics(exposition: &str) -> (bool, String) {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

#[test]
fn promtool_finds_a_family_without_help() {
    let (passed, said) = check_metrics(
        "# TYPE tollgate_undocumented_total counter\ntollgate_undocumented_total 1\n",
    );
    assert!(!passed || !said.trim().is_empty(), "{said}");
    assert!(said.contains("no help text"), "{said}");
}

#[tokio::test]
async fn promtool_reports_nothing_about_the_metrics_listener() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 1.0, |_| {}).await;
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_url = format!("http://{}/metrics", metrics.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(metrics, tollgate::http::metrics_router()).await });

    let customer = app.signup().await;
    let token = app.login(&customer).await;
    for path in [
        "/vedic/v1/chart",
        "/western/v1/natal",
        "/vedic/v1/status/503",
    ] {
        app.call(path, &customer.api_key).await;
    }
    app.call("/vedic/v1/chart", "tgk_notakeyofanyone").await;
    app.client
        .get(app.url("/account/v1/usage"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    app.admin_get(&format!("/admin/v1/accounts/{}/usage", customer.account_id))
        .await;
    // The calls accounted and their spans exported, so those families are there too.
    app.wait_for_ledger(customer.account_id, 3).await;
    collector.trace_of_server_span("GET /vedic/v1/chart").await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let scrape = app.client.get(&metrics_url).send().await.unwrap();
    assert_eq!(scrape.status(), 200);
    let exposition = scrape.text().await.unwrap();
    for family in [
        "tollgate_http_requests_total",
        "tollgate_http_request_duration_seconds",
        "tollgate_upstream_duration_seconds",
        "tollgate_usage_events_accounted_total",
        "tollgate_trace_spans_exported_total",
    ] {
        assert!(
            exposition.contains(&format!("# HELP {family} ")),
            "no HELP for {family}:\n{exposition}"
        );
    }
    let (passed, said) = check_metrics(&exposition);
    assert!(
        passed && said.trim().is_empty(),
        "promtool check metrics said:\n{said}\non:\n{exposition}"
    );
}
