//! Spans as a collector receives them from the real gateway (SPEC §22): one server span
//! per proxied call with a client span under it that the upstream is told of, one per
//! account and admin API call, sampling by ratio and by the caller's `traceparent`, no
//! secret anywhere, and a collector that is down or stuck changing nothing for clients.

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::{Value as Json, json};
use tollgate::config::RoutePrice;
use tollgate::plan::RateLimitInput;

use super::collector::{Collector, Span};
use super::traced_app;
use crate::common::{ADMIN_TOKEN, SHARED_SECRET};

/// A caller's trace, sampled (`-01`) or not (`-00`).
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn server_span<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.name == name && s.kind == SpanKind::Server)
        .unwrap_or_else(|| panic!("no server span {name} in {spans:#?}"))
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.trace_id == parent.trace_id && s.parent_span_id == parent.span_id)
        .collect()
}

/// The `traceparent` the upstream received with the call to `path`, if any.
fn traceparent_upstream(app: &crate::common::TestApp, path: &str) -> Option<String> {
    let recorded = app.upstream.recorded();
    let call = recorded
        .iter()
        .find(|r| r.path == path)
        .unwrap_or_else(|| panic!("the upstream never got {path}"));
    let values: Vec<_> = call.headers.get_all("traceparent").iter().collect();
    assert!(values.len() <= 1, "{values:?}");
    values.first().map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_sampled_call_is_a_server_span_over_a_client_span_the_upstream_is_told_of() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 1.0, |_| {}).await;
    let customer = app.signup().await;

    let res = app
        .client
        .get(app.url("/vedic/v1/chart/d9?sign=leo"))
        .header("x-api-key", &customer.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_owned();

    let spans = collector.trace_of_server_span("GET /vedic/v1/chart").await;
    let server = server_span(&spans, "GET /vedic/v1/chart");
    assert!(server.parent_span_id.is_empty(), "a new trace: {server:?}");
    assert_eq!(server.text("http.request.method"), Some("GET"));
    assert_eq!(server.text("url.path"), Some("/vedic/v1/chart/d9"));
    assert_eq!(server.text("http.route"), Some("/vedic/v1/chart"));
    assert_eq!(server.int("http.response.status_code"), Some(200));
    assert_eq!(
        server.text("tollgate.request_id"),
        Some(request_id.as_str())
    );
    assert_eq!(server.int("tollgate.account_id"), Some(customer.account_id));
    assert_eq!(server.int("tollgate.key_id"), Some(customer.key_id));
    assert_eq!(server.text("tollgate.outcome"), Some("forwarded"));
    assert_eq!(server.resource["service.name"].text(), Some("tollgate"));
    assert_eq!(
        server.resource["service.version"].text(),
        Some(env!("CARGO_PKG_VERSION"))
    );

    let clients = children(&spans, server);
    assert_eq!(clients.len(), 1, "{spans:#?}");
    let client = clients[0];
    assert_eq!(client.kind, SpanKind::Client);
    assert_eq!(client.int("http.response.status_code"), Some(200));
    assert_eq!(client.text("url.path"), Some("/vedic/v1/chart/d9"));
    assert_eq!(client.text("server.address"), Some("127.0.0.1"));
    assert_eq!(
        traceparent_upstream(&app, "/vedic/v1/chart/d9").as_deref(),
        Some(format!("00-{}-{}-01", client.trace_id, client.span_id).as_str()),
        "the upstream is told of the client span"
    );
    assert!(
        collector
            .content_types()
            .iter()
            .all(|t| t == "application/x-protobuf"),
        "{:?}",
        collector.content_types()
    );
}

#[tokio::test]
async fn a_proxied_calls_span_is_named_by_its_analytics_route() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 1.0, |c| {
        c.pricing.routes = vec![RoutePrice {
            prefix: "/western/v1/synastry/".into(),
            cost: 2,
        }];
    })
    .await;
    let customer = app.signup().await;
    for path in [
        "/western/v1/synastry/report/full",
        "/western/v1/natal/chart/x",
    ] {
        assert_eq!(app.call(path, &customer.api_key).await.status(), 200);
    }
    collector
        .trace_of_server_span("GET /western/v1/synastry/")
        .await;
    let spans = collector
        .trace_of_server_span("GET /western/v1/natal")
        .await;
    let server = server_span(&spans, "GET /western/v1/natal");
    assert_eq!(server.text("url.path"), Some("/western/v1/natal/chart/x"));
}

#[tokio::test]
async fn a_refused_call_records_its_refusal_and_has_no_client_span() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 1.0, |c| {
        c.usage.free_rate_limit = Some(RateLimitInput {
            per_second: 1,
            burst: Some(1),
        });
    })
    .await;
    let customer = app.signup().await;

    let refused = app.call("/vedic/v1/refused", "tgk_notakeyofanyone").await;
    assert_eq!(refused.status(), 401);
    assert_eq!(
        app.call("/vedic/v1/first", &customer.api_key)
            .await
            .status(),
        200
    );
    assert_eq!(
        app.call("/vedic/v1/second", &customer.api_key)
            .await
            .status(),
        429
    );

    let spans = collector
        .trace_of_server_span("GET /vedic/v1/refused")
        .await;
    let invalid = server_span(&spans, "GET /vedic/v1/refused");
    assert_eq!(invalid.text("tollgate.outcome"), Some("INVALID_API_KEY"));
    assert_eq!(invalid.int("http.response.status_code"), Some(401));
    assert_eq!(
        invalid.attr("tollgate.account_id"),
        None,
        "no caller is known"
    );
    assert!(children(&spans, invalid).is_empty(), "{spans:#?}");

    let spans = collector.trace_of_server_span("GET /vedic/v1/second").await;
    let limited = server_span(&spans, "GET /vedic/v1/second");
    assert_eq!(limited.text("tollgate.outcome"), Some("RATE_LIMITED"));
    assert_eq!(limited.int("http.response.status_code"), Some(429));
    assert_eq!(
        limited.int("tollgate.account_id"),
        Some(customer.account_id)
    );
    assert_eq!(limited.int("tollgate.key_id"), Some(customer.key_id));
    assert!(children(&spans, limited).is_empty(), "{spans:#?}");
    assert!(
        app.upstream
            .recorded()
            .iter()
            .all(|r| r.path != "/vedic/v1/second" && r.path != "/vedic/v1/refused")
    );
}

#[tokio::test]
async fn an_upstream_5xx_is_forwarded_and_marks_both_spans_as_errors() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 1.0, |_| {}).await;
    let customer = app.signup().await;
    let res = app.call("/vedic/v1/status/503", &customer.api_key).await;
    assert_eq!(res.status(), 503);

    let spans = collector.trace_of_server_span("GET /vedic/v1/status").await;
    let server = server_span(&spans, "GET /vedic/v1/status");
    assert_eq!(server.text("tollgate.outcome"), Some("forwarded"));
    assert_eq!(server.int("http.response.status_code"), Some(503));
    assert_eq!(server.status, 2, "error");
    let client = children(&spans, server)[0];
    assert_eq!(client.int("http.response.status_code"), Some(503));
    assert_eq!(client.status, 2, "error");
}

#[tokio::test]
async fn a_call_with_a_sampled_traceparent_continues_that_trace_whatever_the_ratio() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 0.0, |_| {}).await;
    let customer = app.signup().await;
    let theirs = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");

    let res = app
        .client
        .get(app.url("/vedic/v1/continued"))
        .header("x-api-key", &customer.api_key)
        .header("traceparent", &theirs)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    let spans = collector
        .trace_of_server_span("GET /vedic/v1/continued")
        .await;
    let server = server_span(&spans, "GET /vedic/v1/continued");
    assert_eq!(server.trace_id, CALLER_TRACE);
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    let client = children(&spans, server)[0];
    let told = traceparent_upstream(&app, "/vedic/v1/continued").unwrap();
    assert_eq!(told, format!("00-{CALLER_TRACE}-{}-01", client.span_id));
    assert_ne!(told, theirs, "our span replaces the caller's");
}

#[tokio::test]
async fn a_call_with_an_unsampled_traceparent_makes_no_span_even_at_ratio_one() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 1.0, |_| {}).await;
    let customer = app.signup().await;
    let theirs = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-00");

    let res = app
        .client
        .get(app.url("/vedic/v1/unsampled"))
        .header("x-api-key", &customer.api_key)
        .header("traceparent", &theirs)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // A later sampled call's spans arrive after any the first would have made.
    assert_eq!(
        app.call("/vedic/v1/later", &customer.api_key)
            .await
            .status(),
        200
    );
    collector.trace_of_server_span("GET /vedic/v1/later").await;

    let spans = collector.spans();
    assert!(
        spans
            .iter()
            .all(|s| s.trace_id != CALLER_TRACE && !s.name.contains("unsampled")),
        "{spans:#?}"
    );
    assert_eq!(
        traceparent_upstream(&app, "/vedic/v1/unsampled").as_deref(),
        Some(theirs.as_str()),
        "a call we do not trace passes its traceparent on as it came"
    );
}

#[tokio::test]
async fn at_ratio_zero_no_span_is_exported() {
    let collector = Collector::start().await;
    let mut app = traced_app(&collector, 0.0, |_| {}).await;
    let customer = app.signup().await;
    app.login(&customer).await;
    for _ in 0..5 {
        assert_eq!(
            app.call("/vedic/v1/chart", &customer.api_key)
                .await
                .status(),
            200
        );
    }
    assert!(
        traceparent_upstream(&app, "/vedic/v1/chart").is_none(),
        "no span, no traceparent"
    );
    // Shutdown sends whatever is queued.
    app.stop().await;
    assert!(collector.spans().is_empty(), "{:#?}", collector.spans());
}

#[tokio::test]
async fn account_and_admin_calls_get_a_server_span_named_by_their_route() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 1.0, |_| {}).await;
    let customer = app.signup().await;
    app.login(&customer).await;
    let res = app
        .admin_get(&format!("/admin/v1/accounts/{}/usage", customer.account_id))
        .await;
    assert_eq!(res.status(), 200);
    let res = app.admin_get("/admin/v1/accounts/999999999/usage").await;
    assert_eq!(res.status(), 404);

    let spans = collector
        .wait_for("the admin calls' spans", |spans| {
            spans
                .iter()
                .filter(|s| s.name == "GET /admin/v1/accounts/{account_id}/usage")
                .count()
                == 2
        })
        .await;
    let signup = server_span(&spans, "POST /account/v1/signup");
    assert_eq!(signup.int("http.response.status_code"), Some(201));
    assert_eq!(signup.text("http.route"), Some("/account/v1/signup"));
    let login = server_span(&spans, "POST /account/v1/login");
    assert_eq!(login.int("http.response.status_code"), Some(200));
    let mut statuses: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "GET /admin/v1/accounts/{account_id}/usage")
        .map(|s| (s.int("http.response.status_code"), s.text("url.path")))
        .collect();
    statuses.sort();
    let path = format!("/admin/v1/accounts/{}/usage", customer.account_id);
    assert_eq!(
        statuses,
        [
            (Some(200), Some(path.as_str())),
            (Some(404), Some("/admin/v1/accounts/999999999/usage")),
        ]
    );
    assert!(
        spans
            .iter()
            .all(|s| s.text("tollgate.request_id").is_some()),
        "{spans:#?}"
    );
    // The probes are not traced.
    app.client.get(app.url("/healthz")).send().await.unwrap();
    assert!(
        collector
            .spans()
            .iter()
            .all(|s| !s.name.contains("healthz"))
    );
}

#[tokio::test]
async fn no_span_attribute_carries_a_secret() {
    let collector = Collector::start().await;
    let app = traced_app(&collector, 1.0, |_| {}).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let res = app
        .client
        .post(app.url("/account/v1/keys"))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let created: Json = res.json().await.unwrap();
    let new_key = created["api_key"].as_str().unwrap().to_owned();
    let res = app
        .client
        .get(app.url("/account/v1/usage"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // A key in the query as well as in its header: the query is never recorded.
    let path = format!("/vedic/v1/chart?api_key={}", customer.api_key);
    assert_eq!(app.call(&path, &customer.api_key).await.status(), 200);
    assert_eq!(app.call("/vedic/v1/other", &new_key).await.status(), 200);
    let res = app
        .client
        .get(app.url("/vedic/v1/bearer"))
        .bearer_auth(&customer.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    app.admin_get(&format!("/admin/v1/accounts/{}/usage", customer.account_id))
        .await;
    let res = app
        .client
        .get(app.url("/admin/v1/accounts"))
        .bearer_auth("not-the-admin-token")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);

    let spans = collector
        .wait_for("every call's spans", |spans| {
            spans.iter().any(|s| s.name == "GET /vedic/v1/bearer")
                && spans.iter().any(|s| s.name == "GET /admin/v1/accounts")
                && spans
                    .iter()
                    .any(|s| s.name == "GET /admin/v1/accounts/{account_id}/usage")
                && spans.iter().filter(|s| s.kind == SpanKind::Client).count() == 2
        })
        .await;
    let secrets = [
        customer.api_key.as_str(),
        new_key.as_str(),
        customer.password.as_str(),
        token.as_str(),
        ADMIN_TOKEN,
        "not-the-admin-token",
        SHARED_SECRET,
    ];
    for span in &spans {
        for (key, value) in span.attributes.iter().chain(&span.resource) {
            let shown = value.shown();
            for secret in secrets {
                assert!(
                    !shown.contains(secret),
                    "{} has {key} = {shown}, a secret",
                    span.name
                );
            }
        }
        assert!(!span.name.contains("api_key"), "{}", span.name);
    }
}

#[tokio::test]
async fn a_collector_that_is_down_or_stuck_changes_nothing_for_clients() {
    // Down: nothing listens on the port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    // Stuck: it accepts connections and never answers.
    let stuck = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stuck_url = format!("http://{}", stuck.local_addr().unwrap());
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = stuck.accept().await {
            held.push(socket);
        }
    });

    for endpoint in [down, stuck_url] {
        let mut app = crate::common::spawn_app_with(|c| {
            c.telemetry.otlp_endpoint = Some(endpoint.clone());
            c.telemetry.sample_ratio = 1.0;
        })
        .await;
        let customer = app.signup().await;
        let started = Instant::now();
        for _ in 0..30 {
            let res = app.call("/vedic/v1/chart", &customer.api_key).await;
            assert_eq!(res.status(), 200, "{endpoint}");
        }
        // Past a batch or two, so an export has been tried meanwhile.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for _ in 0..30 {
            let res = app.call("/vedic/v1/chart", &customer.api_key).await;
            assert_eq!(res.status(), 200, "{endpoint}");
        }
        let calls = started.elapsed() - Duration::from_millis(1500);
        assert!(calls < Duration::from_secs(10), "{endpoint}: {calls:?}");
        let stopping = Instant::now();
        app.stop().await;
        assert!(
            stopping.elapsed() < Duration::from_secs(8),
            "{endpoint}: shutdown took {:?}",
            stopping.elapsed()
        );
    }
    holder.abort();
    let exposition = tollgate::telemetry::prometheus().render();
    assert!(
        exposition.contains("tollgate_trace_spans_dropped_total{reason=\"export_failed\"}"),
        "{exposition}"
    );
}
