//! The upstream API as the proxy reaches it: keep-alive connections (a pool per
//! connection worker, `pool.rs`), plain HTTP or HTTPS (rustls, webpki roots), HTTP/1.1,
//! with every connection attempt bounded as a whole.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::{HeaderName, HeaderValue, Request, Response, Uri};
use secrecy::ExposeSecret;

use super::connect::{BoxError, ConnectTimeout, HttpsConnector, connector};
use super::pool::{Pool, PooledBody};
use crate::config::Config;
use crate::error::ApiError;

/// How calls reach the upstream API: a keep-alive connection pool, plain HTTP or
/// HTTPS (rustls, webpki roots), HTTP/1.1.
#[derive(Clone)]
pub struct Upstream {
    pool: Arc<Pool>,
    connector: ConnectTimeout<HttpsConnector>,
    base: String,
    /// `base` taken apart once, when it is scheme, authority and at most a path.
    origin: Option<Origin>,
    pub(super) key_header: HeaderName,
    pub(super) shared_secret: Option<HeaderValue>,
    pub(super) timeout: Duration,
}

impl Upstream {
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let connector = connector(config.upstream_timeout().min(MAX_CONNECT_TIMEOUT));
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
        let base = config.upstream.base_url.trim_end_matches('/').to_owned();
        Ok(Self {
            pool: pooled(connector.clone()),
            connector,
            origin: Origin::of(&base),
            base,
            key_header: HeaderName::from_bytes(config.upstream.key_header.as_bytes())?,
            shared_secret,
            timeout: config.upstream_timeout(),
        })
    }

    /// The same upstream through a connection pool of its own (a connection worker's).
    pub fn with_own_pool(&self) -> Self {
        Self {
            pool: pooled(self.connector.clone()),
            ..self.clone()
        }
    }

    /// Sends `request` (its URI absolute, see [`Self::uri`]) over a pooled connection
    /// and answers with the response head.
    pub(super) async fn request(
        &self,
        request: Request<Body>,
    ) -> Result<Response<PooledBody>, BoxError> {
        self.pool.request(request).await
    }

    /// The upstream's URI for a client's: the base followed by the client's path and
    /// query.
    pub(super) fn uri(&self, client: &Uri) -> Result<Uri, ApiError> {
        let uri = match &self.origin {
            Some(origin) => origin.uri(client),
            None => {
                let path_and_query = client
                    .path_and_query()
                    .map_or(client.path(), PathAndQuery::as_str);
                Uri::try_from(format!("{}{path_and_query}", self.base)).map_err(Into::into)
            }
        };
        uri.map_err(|e| ApiError::Internal(anyhow::anyhow!("upstream URI: {e}")))
    }

    /// The `Host` header of upstream requests, when worked out once.
    pub(super) fn host(&self) -> Option<&HeaderValue> {
        self.origin.as_ref().map(|o| &o.host)
    }
}

/// The upstream base URL's scheme, authority and path (without its trailing `/`).
#[derive(Clone)]
struct Origin {
    scheme: Scheme,
    authority: Authority,
    path: String,
    /// The `Host` header the client would otherwise format on every call: the host,
    /// and the port unless it is the scheme's default.
    host: HeaderValue,
}

impl Origin {
    /// Built from parts: without a base path the client's path and query are shared as
    /// they are, not parsed again.
    fn uri(&self, client: &Uri) -> Result<Uri, axum::http::Error> {
        let path_and_query = match (self.path.is_empty(), client.path_and_query()) {
            (true, Some(pq)) => pq.clone(),
            (_, pq) => {
                let tail = pq.map_or(client.path(), PathAndQuery::as_str);
                PathAndQuery::try_from(format!("{}{tail}", self.path))?
            }
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
    }

    /// `None` when `base` is anything but `scheme://authority[/path]`.
    fn of(base: &str) -> Option<Self> {
        let uri = Uri::try_from(base).ok()?;
        let parts = uri.into_parts();
        if parts
            .path_and_query
            .as_ref()
            .is_some_and(|pq| pq.query().is_some())
        {
            return None;
        }
        let (scheme, authority) = (parts.scheme?, parts.authority?);
        let default_port = if scheme == Scheme::HTTPS { 443 } else { 80 };
        let host = match authority.port_u16() {
            Some(port) if port != default_port => format!("{}:{port}", authority.host()),
            _ => authority.host().to_owned(),
        };
        Some(Self {
            host: HeaderValue::try_from(host).ok()?,
            scheme,
            authority,
            path: parts
                .path_and_query
                .as_ref()
                .map_or("", |pq| pq.path().trim_end_matches('/'))
                .to_owned(),
        })
    }
}

/// Longest a connection attempt may take (less when `upstream.timeout_ms` is shorter).
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an upstream connection is kept open unused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Most idle upstream connections one pool keeps.
const MAX_IDLE: usize = 1024;

/// A keep-alive pool over `connector`.
fn pooled(connector: ConnectTimeout<HttpsConnector>) -> Arc<Pool> {
    Pool::new(connector, IDLE_TIMEOUT, MAX_IDLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream_uri(base: &str, client: &str) -> String {
        let origin = Origin::of(base).expect("a plain base URL");
        origin.uri(&client.parse().unwrap()).unwrap().to_string()
    }

    #[test]
    fn the_clients_path_and_query_follow_the_base() {
        assert_eq!(
            upstream_uri("http://127.0.0.1:9000", "/vedic/v1/daily?sign=leo"),
            "http://127.0.0.1:9000/vedic/v1/daily?sign=leo"
        );
        assert_eq!(
            upstream_uri("https://api.example.com/astro", "/western/v1/x"),
            "https://api.example.com/astro/western/v1/x"
        );
        assert_eq!(
            upstream_uri("http://h:8080/", "http://gateway/vedic/v1?x=1"),
            "http://h:8080/vedic/v1?x=1"
        );
    }

    #[test]
    fn the_host_header_names_a_port_only_when_it_is_not_the_default() {
        let host = |base: &str| Origin::of(base).unwrap().host;
        assert_eq!(host("http://127.0.0.1:9000"), "127.0.0.1:9000");
        assert_eq!(host("http://api.example.com:80"), "api.example.com");
        assert_eq!(host("https://api.example.com:443/v"), "api.example.com");
        assert_eq!(host("https://api.example.com:80"), "api.example.com:80");
    }

    #[test]
    fn a_base_with_a_query_is_joined_as_text() {
        assert!(Origin::of("http://h/p?x=1").is_none());
    }
}
