//! A local upstream API answering under `/vedic/v1/` and `/western/v1/`.
//!
//! It records what it receives (so tests can check what crossed the gateway) and has
//! a few special routes under either prefix:
//! `status/{code}` answers that status; `slow/{ms}` waits before the head;
//! `bytes/{n}` streams `n` bytes; `echo` streams the request body back; `count`
//! reads the body and answers its length; `cost/{n}` reports the call's cost as `n` in
//! the `x-call-cost` header; `trailer/{n}` streams a chunked body and reports the cost
//! `n` in its trailer (when the request says `TE: trailers`, as HTTP wants);
//! `stream/{u1,u2,…}` answers a `text/event-stream` of a `token` event and a `usage`
//! event (`{"units": u}`) per figure, `pace_ms` apart (query, default 20), then a `done`
//! event, and records how far each stream got ([`UpstreamServer::streams`]). Anything
//! else answers a small JSON body.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The header by which `cost/{n}` reports a call's cost.
pub const COST_HEADER: &str = "x-call-cost";

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body_len: usize,
}

/// How far one `stream/…` answer got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOutcome {
    pub path: String,
    /// Usage events written to the connection.
    pub usage_events_sent: usize,
    /// Whether every event was written; `false` when the client (the gateway) dropped
    /// the connection first.
    pub completed: bool,
}

#[derive(Default)]
struct Shared {
    recorded: Mutex<Vec<Recorded>>,
    streams: Mutex<Vec<StreamOutcome>>,
    record: bool,
}

/// Records a stream's outcome when the stream ends or is dropped.
struct StreamGuard {
    shared: Arc<Shared>,
    outcome: StreamOutcome,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.shared
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.outcome.clone());
    }
}

/// A running upstream on 127.0.0.1.
pub struct UpstreamServer {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl UpstreamServer {
    /// Starts on an ephemeral port, recording requests.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(TcpListener::bind("127.0.0.1:0").await?, true).await
    }

    /// Starts on `listener`; `record` false keeps no history (demo and benchmarks).
    pub async fn start_on(listener: TcpListener, record: bool) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            recorded: Mutex::new(Vec::new()),
            streams: Mutex::new(Vec::new()),
            record,
        });
        let app = router(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Everything received so far, oldest first.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.shared
            .recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl UpstreamServer {
    /// The `stream/…` answers that have ended (completed or dropped), oldest first.
    pub fn streams(&self) -> Vec<StreamOutcome> {
        self.shared
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for UpstreamServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);
    let method = request.method().clone();
    let headers = request.headers().clone();
    let Some(rest) = ["/vedic/v1/", "/western/v1/"]
        .iter()
        .find_map(|p| path.strip_prefix(p))
        .map(str::to_owned)
    else {
        return (StatusCode::NOT_FOUND, "outside the API").into_response();
    };
    let record = |body_len: usize| {
        if shared.record {
            shared
                .recorded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Recorded {
                    method: method.clone(),
                    path: path.clone(),
                    query: query.clone(),
                    headers: headers.clone(),
                    body_len,
                });
        }
    };
    let mut parts = rest.splitn(2, '/');
    match (parts.next().unwrap_or(""), parts.next()) {
        ("status", Some(code)) => {
            record(0);
            let status = code
                .parse()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::BAD_REQUEST);
            (status, axum::Json(json!({"status": status.as_u16()}))).into_response()
        }
        ("cost", Some(n)) => {
            record(0);
            let mut response = axum::Json(json!({"priced": n})).into_response();
            if let Ok(value) = axum::http::HeaderValue::from_str(n) {
                response.headers_mut().insert(COST_HEADER, value);
            }
            response
        }
        ("slow", Some(ms)) => {
            record(0);
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(1000))).await;
            axum::Json(json!({"slept_ms": ms})).into_response()
        }
        ("bytes", Some(n)) => {
            record(0);
            let total: usize = n.parse().unwrap_or(0);
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let stream =
                futures_util::stream::iter((0..total.div_ceil(chunk.len())).map(move |i| {
                    let len = chunk.len().min(total - i * chunk.len());
                    Ok::<_, std::io::Error>(chunk.slice(..len))
                }));
            Response::builder()
                .header("content-length", total)
                .header("content-type", "application/octet-stream")
                .body(Body::from_stream(stream))
                .expect("valid response")
        }
        ("stream", Some(figures)) => {
            record(0);
            let units: Vec<i64> = figures
                .split(',')
                .filter_map(|u| u.trim().parse().ok())
                .collect();
            let pace = query
                .as_deref()
                .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("pace_ms=")))
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(20);
            event_stream(
                shared.clone(),
                path.clone(),
                units,
                Duration::from_millis(pace),
            )
        }
        ("trailer", Some(n)) => {
            record(0);
            let wants_trailers = headers
                .get("te")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.to_ascii_lowercase().contains("trailers"));
            let mut trailers = axum::http::HeaderMap::new();
            if let Ok(value) = axum::http::HeaderValue::from_str(n) {
                trailers.insert(COST_HEADER, value);
            }
            let mut frames = vec![
                Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from_static(b"part one, "))),
                Ok(http_body::Frame::data(Bytes::from_static(b"part two"))),
            ];
            if wants_trailers {
                frames.push(Ok(http_body::Frame::trailers(trailers)));
            }
            let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
            Response::builder()
                .header("content-type", "text/plain")
                .header("trailer", COST_HEADER)
                .body(Body::new(body))
                .expect("valid response")
        }
        ("echo", _) => {
            record(0);
            Response::new(Body::from_stream(request.into_body().into_data_stream()))
        }
        ("count", _) => {
            let mut stream = request.into_body().into_data_stream();
            let mut total = 0usize;
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(c) => total += c.len(),
                    Err(_) => return StatusCode::BAD_REQUEST.into_response(),
                }
            }
            record(total);
            axum::Json(json!({"received_bytes": total})).into_response()
        }
        _ => {
            record(0);
            axum::Json(json!({
                "path": path,
                "query": query,
                "method": method.as_str(),
                "prediction": "A good day to ship.",
            }))
            .into_response()
        }
    }
}

/// A `text/event-stream` of a token and a usage event per figure, `pace` apart, then a
/// `done` event; its outcome recorded when it ends or is dropped.
fn event_stream(shared: Arc<Shared>, path: String, units: Vec<i64>, pace: Duration) -> Response {
    let guard = StreamGuard {
        shared,
        outcome: StreamOutcome {
            path,
            usage_events_sent: 0,
            completed: false,
        },
    };
    let stream = futures_util::stream::unfold((guard, 0usize), move |(mut guard, i)| {
        let units = units.clone();
        async move {
            if i > units.len() {
                return None;
            }
            if i == units.len() {
                guard.outcome.completed = true;
                let done = Bytes::from_static(b"event: done\ndata: {}\n\n");
                return Some((Ok::<_, std::io::Error>(done), (guard, i + 1)));
            }
            if i > 0 {
                tokio::time::sleep(pace).await;
            }
            let chunk = format!(
                "event: token\ndata: {{\"text\": \"t{i}\"}}\n\nevent: usage\ndata: {{\"units\": {}}}\n\n",
                units[i]
            );
            guard.outcome.usage_events_sent += 1;
            Some((Ok(Bytes::from(chunk)), (guard, i + 1)))
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .expect("valid response")
}
