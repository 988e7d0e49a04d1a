//! Per-request observability: the request id, the tracing span and HTTP metrics.
//!
//! Every request gets a fresh [`RequestId`], whatever the client sent; it names the
//! span and is returned as `X-Request-Id` on every response.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use metrics::SharedString;
use tracing::Instrument;

use crate::proxy::path::route_label as proxied_route;
use crate::request_id::{RequestId, X_REQUEST_ID};

// Labels are `'static` where they can be: the metrics registry then neither allocates
// nor copies them on every request.

fn route_label(request: &Request) -> SharedString {
    if let Some(matched) = request.extensions().get::<MatchedPath>() {
        return SharedString::from(matched.as_str().to_owned());
    }
    SharedString::const_str(proxied_route(request.uri().path()).unwrap_or("unmatched"))
}

fn method_label(method: &Method) -> SharedString {
    let known = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::HEAD,
        Method::OPTIONS,
    ];
    const NAMES: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];
    match known.iter().position(|m| m == method) {
        Some(i) => SharedString::const_str(NAMES[i]),
        // Methods a client invents share one label, so series stay few.
        None => SharedString::const_str("OTHER"),
    }
}

fn status_label(status: StatusCode) -> SharedString {
    static LABELS: OnceLock<Vec<String>> = OnceLock::new();
    let labels = LABELS.get_or_init(|| (100..1000).map(|c: u16| c.to_string()).collect());
    SharedString::const_str(&labels[usize::from(status.as_u16()) - 100])
}

pub async fn observe(mut request: Request, next: Next) -> Response {
    let id = RequestId::generate();
    request.extensions_mut().insert(id);
    let route = route_label(&request);
    let method = request.method().clone();
    let span = tracing::info_span!(
        "request",
        request_id = %id.0,
        method = %method,
        route = %route,
        account_id = tracing::field::Empty,
    );
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    response
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), id.header_value());

    let elapsed = started.elapsed();
    span.in_scope(|| {
        tracing::debug!(
            status = status.as_u16(),
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            "request finished"
        );
    });
    metrics::counter!("tollgate_http_requests_total",
        "route" => route.clone(), "method" => method_label(&method), "status" => status_label(status))
    .increment(1);
    metrics::histogram!("tollgate_http_request_duration_seconds", "route" => route)
        .record(elapsed.as_secs_f64());
    response
}
