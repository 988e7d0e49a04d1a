//! Per-request observability: the request id, the tracing span, HTTP metrics, and the
//! server span of a traced call (SPEC §22).
//!
//! Every request gets a fresh [`RequestId`], whatever the client sent; it names the
//! span and is returned as `X-Request-Id` on every response. Proxied calls and the
//! account and admin APIs' calls are traced when sampled; with trace export off, a
//! request's [`ServerSpan`] is `None` and costs nothing but the checks of it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics::{Counter, Histogram, SharedString};
use tracing::Instrument;

use crate::error::ApiError;
use crate::proxy::path::route_label as proxied_route;
use crate::request_id::{RequestId, X_REQUEST_ID};
use crate::telemetry::traces::{ServerSpan, Tracing};

// Labels are `'static` where they can be: the metrics registry then neither allocates
// nor copies them on every request.

/// The route label: the matched route's, else a `'static` one (a proxied prefix's, or
/// `unmatched`), which is returned as such too.
fn route_label(request: &Request) -> (SharedString, Option<&'static str>) {
    if let Some(matched) = request.extensions().get::<MatchedPath>() {
        return (SharedString::from(matched.as_str().to_owned()), None);
    }
    let label = proxied_route(request.uri().path()).unwrap_or("unmatched");
    (SharedString::const_str(label), Some(label))
}

const METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::HEAD,
    Method::OPTIONS,
];
const METHOD_NAMES: [&str; 8] = [
    "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", // known methods
    "OTHER",   // methods a client invents share one label, so series stay few
];

/// The index of a method's label in [`METHOD_NAMES`].
fn method_index(method: &Method) -> usize {
    METHODS
        .iter()
        .position(|m| m == method)
        .unwrap_or(METHODS.len())
}

fn status_label(status: StatusCode) -> SharedString {
    static LABELS: OnceLock<Vec<String>> = OnceLock::new();
    let labels = LABELS.get_or_init(|| (100..1000).map(|c: u16| c.to_string()).collect());
    SharedString::const_str(&labels[usize::from(status.as_u16()) - 100])
}

/// A request's series: its count by route, method and status, its duration by route.
struct Series {
    requests: Counter,
    duration: Histogram,
}

impl Series {
    fn register(route: SharedString, method: usize, status: StatusCode) -> Self {
        Self {
            requests: metrics::counter!("tollgate_http_requests_total",
                "route" => route.clone(),
                "method" => SharedString::const_str(METHOD_NAMES[method]),
                "status" => status_label(status)),
            duration: metrics::histogram!("tollgate_http_request_duration_seconds", "route" => route),
        }
    }

    /// Counts a request and records its duration. The series of the `'static` routes
    /// (the proxied prefixes, where nearly every request goes) are registered once per
    /// worker thread, method and status, and looked up there without any lock.
    fn record(
        route: &SharedString,
        name: Option<&'static str>,
        method: usize,
        status: StatusCode,
        seconds: f64,
    ) {
        type Key = (usize, usize, u16);
        thread_local! {
            static KNOWN: RefCell<HashMap<Key, Series>> = RefCell::new(HashMap::new());
        }
        let Some(name) = name else {
            let series = Self::register(route.clone(), method, status);
            series.requests.increment(1);
            series.duration.record(seconds);
            return;
        };
        let key = (name.as_ptr() as usize, method, status.as_u16());
        KNOWN.with_borrow_mut(|known| {
            let series = match known.get(&key) {
                Some(series) => series,
                None => {
                    let series = Self::register(route.clone(), method, status);
                    if !crate::telemetry::recorder_installed() {
                        series.requests.increment(1);
                        series.duration.record(seconds);
                        return;
                    }
                    known.entry(key).or_insert(series)
                }
            };
            series.requests.increment(1);
            series.duration.record(seconds);
        });
    }
}

/// The router's middleware: [`observed`] around the rest of the router, with a server
/// span (named by the route's template) for a sampled call of the account or admin API.
pub async fn observe(State(tracing): State<Tracing>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let api = path.starts_with("/account/v1/") || path.starts_with("/admin/v1/");
    let trace = if tracing.is_on() && api {
        tracing.server_span(&request, false, || {
            let matched = request.extensions().get::<MatchedPath>();
            matched.map(|m| m.as_str().to_owned())
        })
    } else {
        None
    };
    observed(request, trace, |request, _| next.run(request)).await
}

/// Runs `inner` on `request` with its request id, span and HTTP metrics: the router's
/// middleware, and the proxied prefixes' own path around the proxy (see `Public`).
/// `trace`, the call's server span when it is sampled, is handed to `inner` and ended
/// with the answer's status.
pub async fn observed<F, Fut>(mut request: Request, trace: Option<ServerSpan>, inner: F) -> Response
where
    F: FnOnce(Request, Option<ServerSpan>) -> Fut,
    Fut: Future<Output = Response>,
{
    let id = RequestId::generate();
    request.extensions_mut().insert(id);
    let (route, static_route) = route_label(&request);
    let method = request.method().clone();
    // Fields as text, which the log formatter keeps as they are until a line inside
    // the request is logged (`telemetry::deferred`); they print as `%` fields.
    let mut id_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id_text: &str = id.0.hyphenated().encode_lower(&mut id_text);
    if let Some(trace) = &trace {
        trace.request_id(id_text);
    }
    let span = tracing::info_span!(
        "request",
        request_id = id_text,
        method = method.as_str(),
        route = route.as_ref(),
        account_id = tracing::field::Empty,
    );
    let started = Instant::now();
    let mut response = if super::limits::head_too_large(request.headers()) {
        if let Some(trace) = trace.as_ref().filter(|t| t.is_proxied()) {
            trace.outcome(ApiError::HeadersTooLarge.status_and_code().1);
        }
        ApiError::HeadersTooLarge.into_response()
    } else {
        inner(request, trace.clone()).instrument(span.clone()).await
    };
    let status = response.status();
    if let Some(trace) = trace {
        trace.finish(status);
    }
    response
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), id.header_value());

    let elapsed = started.elapsed();
    // Entering the span costs even when the line is filtered out: ask first.
    if tracing::enabled!(tracing::Level::DEBUG) {
        span.in_scope(|| {
            tracing::debug!(
                status = status.as_u16(),
                latency_ms = elapsed.as_secs_f64() * 1000.0,
                "request finished"
            );
        });
    }
    Series::record(
        &route,
        static_route,
        method_index(&method),
        status,
        elapsed.as_secs_f64(),
    );
    response
}
