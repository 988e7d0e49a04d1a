//! A local upstream API answering under `/vedic/v1/` and `/western/v1/`.
//!
//! It records what it receives (so tests can check what crossed the gateway) and has
//! a few special routes under either prefix:
//! `status/{code}` answers that status; `slow/{ms}` waits before the head;
//! `bytes/{n}` streams `n` bytes; `echo` streams the request body back; `count`
//! reads the body and answers its length; `cost/{n}` reports the call's cost as `n` in
//! the `x-call-cost` header. Anything else answers a small JSON body.

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

#[derive(Default)]
struct Shared {
    recorded: Mutex<Vec<Recorded>>,
    record: bool,
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
