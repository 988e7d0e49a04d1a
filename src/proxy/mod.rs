//! The metering proxy (SPEC §3.1): authenticate, admit, forward, account.
//!
//! Bodies stream both ways without being buffered whole. The usage event is published
//! when the upstream's response head arrives: every upstream status counts, while the
//! gateway's own 401/429/502/504 answers publish nothing.

pub mod headers;
pub mod path;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderName, HeaderValue, Response, Uri, Version};
use axum::response::IntoResponse;
use chrono::Utc;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use secrecy::ExposeSecret;

use crate::account::auth::authenticate_key;
use crate::app::AppState;
use crate::config::Config;
use crate::error::ApiError;
use crate::http::RequestId;
use crate::usage::UsageEvent;

type HttpsConnector = hyper_rustls::HttpsConnector<HttpConnector>;

/// How calls reach the upstream API: one keep-alive connection pool, plain HTTP or
/// HTTPS (rustls, webpki roots), HTTP/1.1.
#[derive(Clone)]
pub struct Upstream {
    client: Client<ConnectTimeout<HttpsConnector>, Body>,
    base: String,
    key_header: HeaderName,
    shared_secret: Option<HeaderValue>,
    timeout: Duration,
}

impl Upstream {
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let connector = ConnectTimeout {
            inner: hyper_rustls::HttpsConnectorBuilder::new()
                .with_webpki_roots()
                .https_or_http()
                .enable_http1()
                .wrap_connector(http),
            timeout: config.upstream_timeout().min(MAX_CONNECT_TIMEOUT),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(1024)
            .build(connector);
        let shared_secret = match &config.upstream.shared_secret {
            Some(secret) => {
                let mut value = HeaderValue::from_str(secret.expose_secret()).map_err(|_| {
                    anyhow::anyhow!("upstream.shared_secret is not a valid header value")
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        Ok(Self {
            client,
            base: config.upstream.base_url.trim_end_matches('/').to_owned(),
            key_header: HeaderName::from_bytes(config.upstream.key_header.as_bytes())?,
            shared_secret,
            timeout: config.upstream_timeout(),
        })
    }

    /// The upstream's URI for a client's path and query.
    fn uri(&self, path_and_query: &str) -> Result<Uri, ApiError> {
        Uri::try_from(format!("{}{}", self.base, path_and_query))
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("upstream URI: {e}")))
    }
}

/// Longest a connection attempt may take (less when `upstream.timeout_ms` is shorter).
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Bounds a whole connection attempt — DNS, TCP and the TLS handshake — so an upstream
/// that accepts but never completes one is a connect failure (502), not a slow answer.
#[derive(Clone)]
struct ConnectTimeout<C> {
    inner: C,
    timeout: Duration,
}

impl<C> tower::Service<Uri> for ConnectTimeout<C>
where
    C: tower::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (timeout, connecting) = (self.timeout, self.inner.call(uri));
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected.map_err(Into::into),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {} ms", timeout.as_millis()),
                )
                .into()),
            }
        })
    }
}

/// Longest route kept in a ledger row.
const MAX_ROUTE_CHARS: usize = 512;

/// Handles every request under the proxied prefixes.
pub async fn handle(State(state): State<AppState>, request: Request) -> Response<Body> {
    match forward(&state, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn forward(state: &AppState, request: Request) -> Result<Response<Body>, ApiError> {
    let path = request.uri().path();
    if path::prefix_of(path).is_none() {
        return Err(ApiError::NotFound);
    }
    if !path::is_contained(path) {
        tracing::warn!(path, "path escaping its prefix refused");
        return Err(ApiError::NotFound);
    }
    let upstream = &state.upstream;
    let principal = authenticate_key(
        &state.db,
        &state.keys,
        request.headers(),
        upstream.key_header.as_str(),
    )
    .await?;
    let span = tracing::Span::current();
    span.record("account_id", principal.account_id);

    let request_id = request
        .extensions()
        .get::<RequestId>()
        .copied()
        .unwrap_or_else(RequestId::generate);
    let now = Utc::now();
    if !state
        .throttler
        .admit(principal.account_id, request_id.0, now)
        .admitted()
    {
        return Err(ApiError::Throttled);
    }

    let client_ip = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let (parts, body) = request.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or(parts.uri.path(), |pq| pq.as_str());
    let uri = upstream.uri(path_and_query)?;
    let method = parts.method;
    let mut upstream_request = axum::http::Request::new(body);
    *upstream_request.method_mut() = method.clone();
    *upstream_request.uri_mut() = uri;
    *upstream_request.headers_mut() = headers::upstream_request_headers(
        parts.headers,
        &upstream.key_header,
        upstream.shared_secret.as_ref(),
        &request_id.header_value(),
        client_ip,
    );

    let started = Instant::now();
    let result =
        tokio::time::timeout(upstream.timeout, upstream.client.request(upstream_request)).await;
    metrics::histogram!("tollgate_upstream_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    let upstream_response = match result {
        Err(_) => {
            metrics::counter!("tollgate_upstream_errors_total", "kind" => "timeout").increment(1);
            tracing::warn!(
                timeout_ms = upstream.timeout.as_millis() as u64,
                "upstream timed out"
            );
            return Err(ApiError::UpstreamTimeout);
        }
        // A connect timeout is a connect error (502), not a slow answer.
        Ok(Err(e)) => {
            metrics::counter!("tollgate_upstream_errors_total", "kind" => "unreachable")
                .increment(1);
            tracing::warn!(error = %crate::error::anyhow_chain(&e), "upstream unreachable");
            return Err(ApiError::UpstreamUnavailable(e.to_string()));
        }
        Ok(Ok(r)) => r,
    };

    let (mut response, body) = upstream_response.into_parts();
    if state.usage.enabled() {
        state.usage.publish(UsageEvent {
            transaction_id: request_id.0,
            account_id: principal.account_id,
            key_id: principal.key_id,
            occurred_at: now,
            method,
            route: parts.uri.path().chars().take(MAX_ROUTE_CHARS).collect(),
            upstream_status: response.status.as_u16(),
        });
    }

    headers::strip_hop_by_hop(&mut response.headers);
    response.version = Version::HTTP_11;
    response.extensions = Default::default();
    Ok(Response::from_parts(response, Body::new(body)))
}
