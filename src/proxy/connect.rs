//! Connections to the upstream API: plain HTTP or HTTPS (rustls, webpki roots),
//! HTTP/1.1, `TCP_NODELAY`, each attempt bounded as a whole.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(super) type HttpsConnector = hyper_rustls::HttpsConnector<HttpConnector>;

/// Plain HTTP or HTTPS (rustls, webpki roots), HTTP/1.1, `TCP_NODELAY`, each attempt
/// bounded by `timeout`.
pub(super) fn connector(timeout: Duration) -> ConnectTimeout<HttpsConnector> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    ConnectTimeout {
        inner: hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http),
        timeout,
    }
}

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
