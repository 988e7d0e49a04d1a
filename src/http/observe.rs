//! Per-request observability: the request id, the tracing span and HTTP metrics.
//!
//! Every request gets a fresh UUID v4, whatever the client sent. It names the span,
//! is the admission hash's input and the ledger's transaction id, and is returned as
//! `X-Request-Id` on every response.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use uuid::Uuid;

use crate::proxy::headers::X_REQUEST_ID;

/// The gateway's id of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId(pub Uuid);

impl RequestId {
    pub fn generate() -> Self {
        Self(Uuid::new_v4())
    }

    /// Lowercase, hyphenated.
    pub fn header_value(&self) -> HeaderValue {
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let text = self.0.hyphenated().encode_lower(&mut buf);
        HeaderValue::from_str(text).expect("a UUID is a valid header value")
    }
}

fn route_label(request: &Request) -> String {
    if let Some(matched) = request.extensions().get::<MatchedPath>() {
        return matched.as_str().to_owned();
    }
    match crate::proxy::path::prefix_of(request.uri().path()) {
        Some(prefix) => format!("{prefix}*"),
        None => "unmatched".to_owned(),
    }
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
        status = tracing::field::Empty,
    );
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    response
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), id.header_value());

    let elapsed = started.elapsed();
    span.record("status", status.as_u16());
    span.in_scope(|| {
        tracing::debug!(
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            "request finished"
        );
    });
    let labels = [
        ("route", route.clone()),
        ("method", method.to_string()),
        ("status", status.as_u16().to_string()),
    ];
    metrics::counter!("tollgate_http_requests_total", &labels).increment(1);
    metrics::histogram!("tollgate_http_request_duration_seconds", "route" => route)
        .record(elapsed.as_secs_f64());
    response
}
