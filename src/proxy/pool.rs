//! Keep-alive HTTP/1.1 connections to the upstream, one pool per connection worker.
//!
//! A call takes the most recently used idle connection, or opens one, and the connection
//! comes back to the pool the moment the response body has been read to its end (or
//! had none). No task is spawned per call and nothing is shared across workers: the pool
//! is only touched by its worker's thread, so its lock is never contended.
//!
//! A pooled connection the upstream closed meanwhile is noticed before the request is
//! written to it (`try_send_request` hands the request back), and the request goes to
//! the next connection, or a new one: a keep-alive race costs no call.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::uri::{PathAndQuery, Scheme};
use axum::http::{HeaderValue, Request, Response, Uri, header};
use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use tower::ServiceExt;

use super::connect::{BoxError, ConnectTimeout, HttpsConnector};
use crate::sync::lock;

/// Idle connections of one worker, most recently used last.
pub(super) struct Pool {
    connector: ConnectTimeout<HttpsConnector>,
    idle: Mutex<VecDeque<Idle>>,
    idle_timeout: Duration,
    max_idle: usize,
    reaping: AtomicBool,
}

struct Idle {
    sender: SendRequest<Body>,
    since: Instant,
}

impl Pool {
    pub(super) fn new(
        connector: ConnectTimeout<HttpsConnector>,
        idle_timeout: Duration,
        max_idle: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            connector,
            idle: Mutex::new(VecDeque::new()),
            idle_timeout,
            max_idle,
            reaping: AtomicBool::new(false),
        })
    }

    /// Sends `request` (absolute URI) over an idle connection, or a new one, and
    /// answers with the response head; its body gives the connection back when read.
    pub(super) async fn request(
        self: &Arc<Self>,
        mut request: Request<Body>,
    ) -> Result<Response<PooledBody>, BoxError> {
        let target = request.uri().clone();
        to_origin_form(&mut request)?;
        while let Some(mut sender) = self.checkout() {
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(request).await {
                Ok(response) => return Ok(self.wrap(response, sender)),
                Err(mut failed) => match failed.take_message() {
                    // Not written: the connection had closed; try the next one.
                    Some(unsent) => request = unsent,
                    None => return Err(failed.into_error().into()),
                },
            }
        }
        let io = self.connector.clone().oneshot(target).await?;
        let (mut sender, connection) = http1::handshake(io).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        self.start_reaping();
        let response = sender.send_request(request).await?;
        Ok(self.wrap(response, sender))
    }

    /// The most recently used idle connection that is still open.
    fn checkout(&self) -> Option<SendRequest<Body>> {
        let mut idle = lock(&self.idle);
        while let Some(entry) = idle.pop_back() {
            if !entry.sender.is_closed() && entry.since.elapsed() < self.idle_timeout {
                return Some(entry.sender);
            }
        }
        None
    }

    fn give_back(&self, sender: SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = lock(&self.idle);
        if idle.len() >= self.max_idle {
            idle.pop_front();
        }
        idle.push_back(Idle {
            sender,
            since: Instant::now(),
        });
    }

    /// Closes the connections idle for longer than the idle timeout, oldest first.
    fn prune(&self) {
        let mut idle = lock(&self.idle);
        while idle
            .front()
            .is_some_and(|e| e.sender.is_closed() || e.since.elapsed() >= self.idle_timeout)
        {
            idle.pop_front();
        }
    }

    /// Once per pool, on the runtime of its first connection: a task that closes idle
    /// connections on time, and ends with the pool.
    fn start_reaping(self: &Arc<Self>) {
        if self.reaping.swap(true, Ordering::Relaxed) {
            return;
        }
        let pool: Weak<Self> = Arc::downgrade(self);
        let every = (self.idle_timeout / 2).max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match pool.upgrade() {
                    Some(pool) => pool.prune(),
                    None => return,
                }
            }
        });
    }

    fn wrap(
        self: &Arc<Self>,
        response: Response<Incoming>,
        sender: SendRequest<Body>,
    ) -> Response<PooledBody> {
        response.map(|inner| {
            let mut body = PooledBody {
                inner,
                back: Some((self.clone(), sender)),
            };
            if body.inner.is_end_stream() {
                body.give_back();
            }
            body
        })
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        lock(&self.idle).len()
    }
}

/// The request line a connection to the origin takes: path and query only, with the
/// `Host` the absolute URI named unless the caller set one.
fn to_origin_form(request: &mut Request<Body>) -> Result<(), BoxError> {
    let uri = request.uri().clone();
    let host = uri.host().ok_or("upstream URI without a host")?;
    if !request.headers().contains_key(header::HOST) {
        let default_port = if uri.scheme() == Some(&Scheme::HTTPS) {
            443
        } else {
            80
        };
        let host = match uri.port_u16() {
            Some(port) if port != default_port => HeaderValue::try_from(format!("{host}:{port}"))?,
            _ => HeaderValue::from_str(host)?,
        };
        request.headers_mut().insert(header::HOST, host);
    }
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = Uri::from(path);
    Ok(())
}

/// An upstream response body that puts its connection back in the pool once read to its
/// end. Dropped before that, the connection is closed with it.
pub(super) struct PooledBody {
    inner: Incoming,
    back: Option<(Arc<Pool>, SendRequest<Body>)>,
}

impl PooledBody {
    fn give_back(&mut self) {
        if let Some((pool, sender)) = self.back.take() {
            pool.give_back(sender);
        }
    }
}

impl HttpBody for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.give_back(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.give_back(),
            Poll::Ready(Some(Err(_))) => self.back = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::proxy::connect::connector;

    /// An upstream that answers every request on a connection with `body`, closing the
    /// connection after `per_connection` answers; counts the connections it accepted.
    async fn upstream(body: &'static str, per_connection: usize) -> (Uri, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    for _ in 0..per_connection {
                        let mut seen = Vec::new();
                        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                            match socket.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                        }
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}/").parse().unwrap(), accepted)
    }

    fn get(base: &Uri, path: &str) -> Request<Body> {
        let uri = format!("{}{}", base.to_string().trim_end_matches('/'), path);
        Request::get(uri).body(Body::empty()).unwrap()
    }

    async fn text(response: Response<PooledBody>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn pool(idle_timeout: Duration) -> Arc<Pool> {
        Pool::new(connector(Duration::from_secs(1)), idle_timeout, 8)
    }

    #[tokio::test]
    async fn a_connection_read_to_its_end_serves_the_next_call() {
        let (base, accepted) = upstream("hi", usize::MAX).await;
        let pool = pool(Duration::from_secs(60));
        for _ in 0..5 {
            let response = pool.request(get(&base, "/vedic/v1/x")).await.unwrap();
            assert_eq!(text(response).await, "hi");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert_eq!(pool.idle(), 1);
    }

    #[tokio::test]
    async fn a_body_dropped_unread_closes_its_connection() {
        let (base, accepted) = upstream("a longer body", usize::MAX).await;
        let pool = pool(Duration::from_secs(60));
        let response = pool.request(get(&base, "/")).await.unwrap();
        drop(response);
        assert_eq!(pool.idle(), 0);
        let response = pool.request(get(&base, "/")).await.unwrap();
        assert_eq!(text(response).await, "a longer body");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_costs_no_call() {
        // Every connection answers once and closes: each call finds its pooled
        // connection gone and must still be answered.
        let (base, accepted) = upstream("once", 1).await;
        let pool = pool(Duration::from_secs(60));
        for _ in 0..4 {
            let response = pool.request(get(&base, "/")).await.unwrap();
            assert_eq!(text(response).await, "once");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn idle_connections_are_closed_after_the_idle_timeout() {
        let (base, accepted) = upstream("hi", usize::MAX).await;
        let pool = pool(Duration::from_millis(50));
        let response = pool.request(get(&base, "/")).await.unwrap();
        assert_eq!(text(response).await, "hi");
        assert_eq!(pool.idle(), 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(pool.idle(), 0);
        let response = pool.request(get(&base, "/")).await.unwrap();
        assert_eq!(text(response).await, "hi");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_request_line_is_origin_form_with_the_uris_host() {
        let mut request = Request::get("http://up.example:8080/vedic/v1/d?sign=leo")
            .body(Body::empty())
            .unwrap();
        to_origin_form(&mut request).unwrap();
        assert_eq!(request.uri().to_string(), "/vedic/v1/d?sign=leo");
        assert_eq!(request.headers()[header::HOST], "up.example:8080");

        let mut request = Request::get("https://user@up.example:443/w")
            .body(Body::empty())
            .unwrap();
        to_origin_form(&mut request).unwrap();
        assert_eq!(request.uri().to_string(), "/w");
        assert_eq!(request.headers()[header::HOST], "up.example");
    }
}
