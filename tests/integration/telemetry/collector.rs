//! A stand-in for an OpenTelemetry Collector's OTLP/HTTP receiver: it takes
//! `POST /v1/traces` (protobuf), decodes what it gets and keeps the spans, each with its
//! resource's attributes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// An attribute's value, as far as the gateway uses them.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Text(String),
    Int(i64),
    Other(String),
}

impl Value {
    pub fn text(&self) -> Option<&str> {
        match self {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    /// The value as text, whatever its kind: for looking for secrets.
    pub fn shown(&self) -> String {
        match self {
            Value::Text(text) | Value::Other(text) => text.clone(),
            Value::Int(n) => n.to_string(),
        }
    }
}

/// One span as the collector received it.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub kind: SpanKind,
    pub attributes: HashMap<String, Value>,
    pub resource: HashMap<String, Value>,
    /// The status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attributes.get(key)
    }

    pub fn text(&self, key: &str) -> Option<&str> {
        self.attr(key).and_then(Value::text)
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key) {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        }
    }
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    /// Content types of the export requests.
    content_types: Mutex<Vec<String>>,
}

/// A running receiver on 127.0.0.1.
pub struct Collector {
    pub addr: SocketAddr,
    received: Arc<Received>,
    task: JoinHandle<()>,
}

impl Collector {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Received::default());
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(received.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            received,
            task,
        }
    }

    /// The base URL to give `telemetry.otlp_endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received.spans.lock().unwrap().clone()
    }

    pub fn content_types(&self) -> Vec<String> {
        self.received.content_types.lock().unwrap().clone()
    }

    /// The received spans once `done` says they are all there (within 10 s).
    pub async fn wait_for(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the collector never got {what}; it got {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The spans of the trace `trace_id` once a server span of it has arrived.
    pub async fn trace_of_server_span(&self, name: &str) -> Vec<Span> {
        let spans = self
            .wait_for(&format!("a server span named {name}"), |spans| {
                spans
                    .iter()
                    .any(|s| s.name == name && s.kind == SpanKind::Server)
            })
            .await;
        let server = spans
            .iter()
            .find(|s| s.name == name && s.kind == SpanKind::Server)
            .unwrap();
        spans
            .iter()
            .filter(|s| s.trace_id == server.trace_id)
            .cloned()
            .collect()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn export(
    State(received): State<Arc<Received>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    received.content_types.lock().unwrap().push(content_type);
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(r.attributes))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                spans.push(Span {
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    kind: span.kind(),
                    name: span.name,
                    attributes: attributes(span.attributes),
                    resource: resource.clone(),
                    status: span.status.map_or(0, |s| s.code),
                });
            }
        }
    }
    received.spans.lock().unwrap().extend(spans);
    StatusCode::OK
}

fn attributes(list: Vec<KeyValue>) -> HashMap<String, Value> {
    list.into_iter()
        .map(|kv| {
            let value = match kv.value.and_then(|v| v.value) {
                Some(any_value::Value::StringValue(s)) => Value::Text(s),
                Some(any_value::Value::IntValue(n)) => Value::Int(n),
                other => Value::Other(format!("{other:?}")),
            };
            (kv.key, value)
        })
        .collect()
}
