//! Traces (SPEC §22): a server span per proxied call and per account or admin API call,
//! a client span per upstream request, exported over OTLP/HTTP ([`super::export`]) when
//! `telemetry.otlp_endpoint` is set.
//!
//! Spans are made with the OpenTelemetry SDK directly, beside the `tracing` request span
//! the logs use (whose fields stay deferred, see [`super::deferred`]), and each gateway has
//! a tracer of its own. With export off, [`Tracing`] holds nothing: a call pays a branch
//! per step and nothing else (no header read, no id, no allocation). With export on, the
//! sampler decides as the call starts: the `traceparent`'s sampled flag when the call
//! brings one, else `telemetry.sample_ratio` of new traces. An unsampled call has no span
//! at all, and its `traceparent`, if any, goes upstream as the client sent it; a sampled
//! one's upstream request carries a `traceparent` naming its client span instead.
//!
//! No attribute carries a secret: keys, tokens and passwords travel in headers and
//! bodies, and spans record neither (nor the query string).

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::TelemetryConfig;

/// The W3C trace context header.
pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// A gateway's tracer: off (the default), or exporting. Clones share the tracer.
#[derive(Clone, Default)]
pub struct Tracing(Option<Arc<SdkTracer>>);

impl Tracing {
    /// No spans at all.
    pub const fn off() -> Self {
        Self(None)
    }

    /// The tracer `config` asks for and, when it exports, the task that posts its
    /// spans until `stop` (then it sends what is queued, bounded, and ends). Needs a
    /// Tokio runtime.
    pub fn start(
        config: &TelemetryConfig,
        stop: CancellationToken,
    ) -> anyhow::Result<(Self, Option<JoinHandle<()>>)> {
        let Some(url) = config.traces_url() else {
            return Ok((Self::off(), None));
        };
        let (processor, task) = super::export::start(&url, stop)?;
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sample_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .with_resource(super::export::resource())
            .build();
        tracing::info!(
            endpoint = %url,
            sample_ratio = config.sample_ratio,
            "exporting traces over OTLP/HTTP"
        );
        Ok((
            Self(Some(Arc::new(provider.tracer("tollgate")))),
            Some(task),
        ))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// The server span of `request` when it is sampled, named `<METHOD> <route>` (the
    /// method alone when `route` gives none). `route` is asked only for a sampled call;
    /// `proxied` says whether the span will carry the call's outcome.
    #[inline]
    pub fn server_span<B>(
        &self,
        request: &Request<B>,
        proxied: bool,
        route: impl FnOnce() -> Option<String>,
    ) -> Option<ServerSpan> {
        let tracer = self.0.as_ref()?;
        server_span(tracer, request, proxied, route)
    }
}

/// The server span of a sampled call, shared by the layers that add to it.
#[derive(Clone)]
pub struct ServerSpan(Arc<Call>);

struct Call {
    tracer: SdkTracer,
    /// The call's context: the server span, its remote parent's trace state.
    cx: Context,
    name: String,
    proxied: bool,
}

fn server_span<B>(
    tracer: &SdkTracer,
    request: &Request<B>,
    proxied: bool,
    route: impl FnOnce() -> Option<String>,
) -> Option<ServerSpan> {
    let parent = TraceContextPropagator::new()
        .extract_with_context(&Context::new(), &Headers(request.headers()));
    // Named once sampled: a dropped call allocates no name.
    let mut span = tracer
        .span_builder("")
        .with_kind(SpanKind::Server)
        .start_with_context(tracer, &parent);
    if !span.span_context().is_sampled() {
        return None;
    }
    let method = request.method();
    let route = route();
    let name = match &route {
        Some(route) => format!("{method} {route}"),
        None => method.to_string(),
    };
    span.update_name(name.clone());
    span.set_attribute(KeyValue::new("http.request.method", method_value(method)));
    span.set_attribute(KeyValue::new("url.path", request.uri().path().to_owned()));
    if let Some(route) = route {
        span.set_attribute(KeyValue::new("http.route", route));
    }
    Some(ServerSpan(Arc::new(Call {
        tracer: tracer.clone(),
        cx: parent.with_span(span),
        name,
        proxied,
    })))
}

/// A method as an attribute: the usual ones without an allocation.
fn method_value(method: &Method) -> opentelemetry::Value {
    const KNOWN: [(Method, &str); 7] = [
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::PATCH, "PATCH"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
    ];
    match KNOWN.iter().find(|(m, _)| m == method) {
        Some((_, name)) => (*name).into(),
        None => method.as_str().to_owned().into(),
    }
}

impl ServerSpan {
    /// The gateway's request id (the `X-Request-Id` of the answer).
    pub fn request_id(&self, id: &str) {
        self.span_ref()
            .set_attribute(KeyValue::new("tollgate.request_id", id.to_owned()));
    }

    /// Who called: the key's account and the key (never the key itself).
    pub fn caller(&self, account_id: i64, key_id: i64) {
        let span = self.span_ref();
        span.set_attribute(KeyValue::new("tollgate.account_id", account_id));
        span.set_attribute(KeyValue::new("tollgate.key_id", key_id));
    }

    /// How a proxied call ended: `forwarded`, or the refusal's error code.
    pub fn outcome(&self, outcome: &'static str) {
        self.span_ref()
            .set_attribute(KeyValue::new("tollgate.outcome", outcome));
    }

    /// Whether the span is a proxied call's, which records an outcome.
    pub fn is_proxied(&self) -> bool {
        self.0.proxied
    }

    /// The client span of the upstream request to `uri`, a child of this one, started now.
    pub fn client(&self, method: &Method, uri: &Uri) -> ClientSpan {
        let call = &*self.0;
        let mut attributes = vec![
            KeyValue::new("http.request.method", method_value(method)),
            KeyValue::new("url.path", uri.path().to_owned()),
        ];
        if let Some(host) = uri.host() {
            attributes.push(KeyValue::new("server.address", host.to_owned()));
        }
        let port = uri.port_u16().or(match uri.scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        });
        if let Some(port) = port {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        let span = call
            .tracer
            .span_builder(call.name.clone())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&call.tracer, &call.cx);
        ClientSpan(span)
    }

    /// Ends the span with the answer's status.
    pub fn finish(self, status: StatusCode) {
        let span = self.span_ref();
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
        if status.is_server_error() {
            span.set_status(Status::error(status.as_str().to_owned()));
        }
        span.end();
    }

    fn span_ref(&self) -> opentelemetry::trace::SpanRef<'_> {
        self.0.cx.span()
    }
}

/// The span of one upstream request; ended by [`answered`](Self::answered) or
/// [`failed`](Self::failed) (or when dropped).
pub struct ClientSpan(opentelemetry_sdk::trace::Span);

impl ClientSpan {
    /// The `traceparent` that names this span to the upstream.
    pub fn traceparent(&self) -> HeaderValue {
        let context = self.0.span_context();
        let value = format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        );
        HeaderValue::try_from(value).expect("hex digits and dashes")
    }

    /// The upstream's response head arrived.
    pub fn answered(mut self, status: StatusCode) {
        self.0.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
        if status.is_server_error() {
            self.0.set_status(Status::error(status.as_str().to_owned()));
        }
        self.0.end();
    }

    /// No response head: `kind` says why (`timeout`, `unreachable`, `client_body`).
    pub fn failed(mut self, kind: &'static str) {
        self.0.set_attribute(KeyValue::new("error.type", kind));
        self.0.set_status(Status::error(kind));
        self.0.end();
    }
}

/// A request's headers as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_off_makes_no_span() {
        let request = Request::get("/vedic/v1/chart").body(()).unwrap();
        let mut asked = false;
        let span = Tracing::off().server_span(&request, true, || {
            asked = true;
            None
        });
        assert!(span.is_none());
        assert!(!asked, "an unsampled call names no route");
    }

    #[test]
    fn usual_methods_need_no_allocation() {
        assert!(matches!(
            method_value(&Method::GET),
            opentelemetry::Value::String(s) if s.as_str() == "GET"
        ));
        let custom = Method::from_bytes(b"PURGE").unwrap();
        assert_eq!(method_value(&custom).as_str(), "PURGE");
    }
}
