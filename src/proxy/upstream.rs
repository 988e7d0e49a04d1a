//! The upstream API as the proxy reaches it: one keep-alive connection pool, plain
//! HTTP or HTTPS (rustls, webpki roots), HTTP/1.1, with every connection attempt
//! bounded as a whole.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use secrecy::ExposeSecret;

use crate::config::Config;
use crate::error::ApiError;

type HttpsConnector = hyper_rustls::HttpsConnector<HttpConnector>;

/// How calls reach the upstream API: one keep-alive connection pool, plain HTTP or
/// HTTPS (rustls, webpki roots), HTTP/1.1.
#[derive(Clone)]
pub struct Upstream {
    pub(super) client: Client<ConnectTimeout<HttpsConnector>, Body>,
    base: String,
    pub(super) key_header: HeaderName,
    pub(super) shared_secret: Option<HeaderValue>,
    pub(super) timeout: Duration,
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
    pub(super) fn uri(&self, path_and_query: &str) -> Result<Uri, ApiError> {
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
pub(super) struct ConnectTimeout<C> {
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
