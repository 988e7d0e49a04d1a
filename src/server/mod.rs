//! The public listener: accepts client connections, serves a router on each over
//! HTTP/1.1 or HTTP/2, plain or TLS, within the connection limits of SPEC §2.
//!
//! At most `server.max_connections` connections are served at once: past that the
//! accept loop stops taking connections, so new ones wait in the kernel's listen
//! backlog, neither accepted nor refused, while the ones held keep working. Each
//! connection runs on a [`clock::Clock`] (header-read and idle bounds) whatever its
//! protocol, and every request body on a [`body::RequestBody`] (stall bound, faults
//! named as the client's). Connections are served on [`workers`]: one current-thread
//! runtime per core, each with an [`App`] of its own. On shutdown the listener closes, open
//! connections finish their requests for up to `server.shutdown_grace_ms`, and whatever
//! is left is then dropped.

pub mod body;
pub mod clock;
pub mod workers;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::header::CONNECTION;
use axum::http::{HeaderValue, Request, Response, Version};
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ServerConfig;
use crate::telemetry::RateLimitedLog;
use body::RequestBody;
use clock::{Clock, ClockedIo, InFlight};

/// The connection limits of `server.*`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read: Duration,
    pub idle: Duration,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
}

impl Limits {
    pub fn from_config(server: &ServerConfig) -> Self {
        Self {
            header_read: Duration::from_millis(server.header_read_timeout_ms),
            idle: Duration::from_millis(server.idle_timeout_ms),
            max_connections: server.max_connections,
            shutdown_grace: Duration::from_millis(server.shutdown_grace_ms),
        }
    }
}

/// What every connection task shares.
struct Shared {
    tls: Option<TlsAcceptor>,
    http: auto::Builder<TokioExecutor>,
    limits: Limits,
    /// Cancelled on shutdown: connections finish their requests and close.
    drain: CancellationToken,
    /// Cancelled when the grace period is over: connections are dropped.
    abort: CancellationToken,
}

/// Most header fields the HTTP/1 parser takes (hyper's default is 100): the app holds
/// requests to its own, lower bound and answers past it with its own JSON error body
/// (SPEC §21), so a head of up to this many fields gets that answer rather than the
/// parser's bare one. Past 100 the parser's header arrays are allocated per request;
/// under callgrind that measured within noise (50,986 instructions per local call at
/// 1,000 against 50,886 at 256).
pub const PARSER_MAX_HEADERS: usize = 1000;

/// What answers a connection's requests: one per worker, cloned per connection.
pub trait App: Clone + Send + 'static {
    /// The response to `request`.
    fn serve(
        &self,
        request: Request<Body>,
    ) -> impl Future<Output = Response<Body>> + Send + use<Self>;
}

/// Serves on `listener` (TLS when `tls` is given) until `shutdown` resolves, then drains
/// open connections within the grace period. Connections go to the [`workers`] in turn,
/// each served by its worker's app: `apps` makes one per worker.
pub async fn run<A: App>(
    listener: TcpListener,
    mut apps: impl FnMut() -> A,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut http = auto::Builder::new(TokioExecutor::new());
    // The connection clock bounds head reads; hyper's own bound would also cut idle
    // keep-alive connections (see `clock`).
    http.http1()
        .header_read_timeout(None)
        .max_headers(PARSER_MAX_HEADERS);
    let shared = Arc::new(Shared {
        tls,
        http,
        limits,
        drain: CancellationToken::new(),
        abort: CancellationToken::new(),
    });
    let current = [tokio::runtime::Handle::current()];
    let workers = match workers::handles() {
        [] => &current[..],
        started => started,
    };
    let apps: Vec<A> = workers.iter().map(|_| apps()).collect();
    let mut next = 0;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let accept_errors = RateLimitedLog::default();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (tcp, peer) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little, keep serving.
                    if accept_errors.allow() {
                        tracing::warn!(error = %e, suppressed = accept_errors.take_suppressed(), "accepting a connection failed");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // The socket leaves this runtime's reactor for its worker's.
        let tcp = match tcp.into_std() {
            Ok(tcp) => tcp,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "an accepted connection was lost");
                continue;
            }
        };
        let (worker, app) = (&workers[next], apps[next].clone());
        next = (next + 1) % workers.len();
        let shared = shared.clone();
        worker.spawn(connections.track_future(async move {
            let tcp = match TcpStream::from_std(tcp) {
                Ok(tcp) => tcp,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "a connection could not join its worker");
                    return;
                }
            };
            metrics::gauge!("tollgate_connections_open").increment(1.0);
            serve_connection(tcp, peer, app, &shared).await;
            metrics::gauge!("tollgate_connections_open").decrement(1.0);
            drop(slot);
        }));
    }
    // Connections still in the backlog are refused from here on.
    drop(listener);
    let grace = limits.shutdown_grace;
    tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down");
    shared.drain.cancel();
    connections.close();
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "grace period over; dropping the connections still open"
        );
        shared.abort.cancel();
        connections.wait().await;
    }
    Ok(())
}

async fn serve_connection(tcp: TcpStream, peer: SocketAddr, app: impl App, shared: &Shared) {
    let clock = Clock::new(
        shared.limits.header_read,
        shared.limits.idle,
        tokio::time::Instant::now(),
    );
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = &shared.tls else {
        return serve_http(ClockedIo::new(tcp, clock.clone()), clock, peer, app, shared).await;
    };
    // The handshake counts toward the first request head's bound.
    let handshake = tokio::time::timeout(shared.limits.header_read, acceptor.accept(tcp));
    let stream = tokio::select! {
        _ = shared.drain.cancelled() => return,
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                metrics::counter!("tollgate_connection_timeouts_total", "bound" => "header_read")
                    .increment(1);
                tracing::debug!(%peer, "TLS handshake timed out");
                return;
            }
        },
    };
    serve_http(
        ClockedIo::new(stream, clock.clone()),
        clock,
        peer,
        app,
        shared,
    )
    .await
}

async fn serve_http<I>(
    io: ClockedIo<I>,
    clock: Arc<Clock>,
    peer: SocketAddr,
    app: impl App,
    shared: &Shared,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // A body may pause between pieces as long as a head may take to arrive.
    let gap = shared.limits.header_read;
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let in_flight = clock.request_started();
        request.extensions_mut().insert(ConnectInfo(peer));
        let http1 = request.version() < Version::HTTP_2;
        let (parts, incoming) = request.into_parts();
        let (body, left_unread) = RequestBody::new(incoming, gap);
        let request = Request::from_parts(parts, Body::new(body));
        let response = app.serve(request);
        async move {
            let mut response = response.await;
            if http1 && left_unread.get() {
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(response.map(|body| InFlightBody {
                inner: body,
                _in_flight: in_flight,
            }))
        }
    });
    let connection = shared.http.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        _ = shared.drain.cancelled() => {
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                ended = connection.as_mut() => ended,
                _ = shared.abort.cancelled() => return,
            }
        }
    };
    if let Err(e) = ended {
        // Timeouts, resets, malformed heads: the client's business, not an alert.
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// A response body that keeps its request in flight until hyper is done with it.
struct InFlightBody {
    inner: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for InFlightBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        hyper::body::Body::size_hint(&self.inner)
    }
}
