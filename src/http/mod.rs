//! The public router: account, portal, admin, billing and operations routes, with the proxy as the
//! fallback for its two prefixes, under one observability middleware; and [`Public`], which
//! sends the proxied prefixes to the proxy without going through the router. Both trace
//! their calls through the gateway's [`Tracing`] (SPEC §22; off in [`router`]).

mod catalogue_doc;
pub mod limits;
mod observe;
pub mod openapi;
mod ops;

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRef, Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_LENGTH};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::FutureExt;
use futures_util::future::Either;
use tower::ServiceExt;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::ApiError;
use crate::proxy::ProxyState;
use crate::state::AppState;
use crate::telemetry::traces::{ServerSpan, Tracing};
use crate::usage::analytics::RouteBook;

/// Every public route of the gateway. Without `admin.token` the admin API and the
/// operator console do not exist at all: their paths answer 404 like any unknown path;
/// likewise the payment webhook without `billing.stripe_webhook_secret`.
pub fn router(state: AppState) -> Router {
    traced_router(state, Tracing::off())
}

/// [`router`], its account and admin API calls traced by `tracing`.
pub fn traced_router(state: AppState, tracing: Tracing) -> Router {
    let schema = ops::SchemaSeen::default();
    let mut routes = Router::new()
        .route("/healthz", get(ops::healthz))
        .route(
            "/readyz",
            get(move |state| ops::readyz(state, schema.clone())),
        )
        .route("/openapi.json", get(openapi::serve))
        .merge(json_api(crate::account::router()))
        .merge(crate::portal::router());
    if state.config.admin.token.is_some() {
        routes = routes
            .merge(json_api(crate::admin::router()))
            .merge(crate::console::router());
    }
    if state.config.billing.stripe_webhook_secret.is_some() {
        routes = routes.merge(crate::billing::router());
    }
    routes
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(CatchPanicLayer::custom(panicked))
        .layer(middleware::from_fn_with_state(tracing, observe::observe))
        .with_state(state)
}

/// The answer to a request whose handler panicked.
fn panicked(_: Box<dyn Any + Send>) -> Response {
    ApiError::Internal(anyhow::anyhow!("handler panicked")).into_response()
}

/// Every public request: those under the proxied prefixes straight to the proxy, the
/// rest through [`router`].
///
/// A proxied path matches no route, so the router would only try its routes and fall
/// back to the proxy; going there directly keeps the same observability and panic
/// answer while skipping the route lookup and the middleware stack's boxed services,
/// which a proxied call (nearly every call the gateway serves) paid for nothing.
#[derive(Clone)]
pub struct Public {
    router: Router,
    proxy: ProxyState,
    tracing: Tracing,
    /// How a proxied call's server span names its route (SPEC §18's route names);
    /// only with trace export on.
    routes: Option<Arc<RouteBook>>,
}

impl Public {
    /// Every public request, untraced.
    pub fn new(state: AppState) -> Self {
        Self::traced(state, Tracing::off())
    }

    /// Every public request, proxied and API calls traced by `tracing`.
    pub fn traced(state: AppState, tracing: Tracing) -> Self {
        Self {
            proxy: ProxyState::from_ref(&state),
            routes: tracing.is_on().then(|| state.routes.clone()),
            router: traced_router(state, tracing.clone()),
            tracing,
        }
    }
}

impl crate::server::App for Public {
    fn serve(&self, request: Request) -> impl Future<Output = Response> + Send + use<> {
        if crate::proxy::path::prefix_of(request.uri().path()).is_some() {
            let proxy = self.proxy.clone();
            let trace = self.tracing.server_span(&request, true, || {
                let routes = self.routes.as_ref()?;
                Some(routes.name_of(request.uri().path()))
            });
            Either::Left(observe::observed(request, trace, |request, trace| {
                proxied_call(proxy, request, trace)
            }))
        } else {
            let routed = self.router.clone().oneshot(request);
            Either::Right(routed.map(|answer| answer.unwrap_or_else(|never| match never {})))
        }
    }
}

/// A proxied call, finished as the router finishes its fallback's answers (a
/// `Content-Length` when the body's length is known and none was given, no body for
/// `HEAD`), and answered as its panic layer would if the proxy panics.
async fn proxied_call(proxy: ProxyState, request: Request, trace: Option<ServerSpan>) -> Response {
    let head = request.method() == Method::HEAD;
    let traced_panic = trace.clone();
    // The proxy's future is large (several kB): boxed, the futures around it stay small
    // and moving them costs little.
    let call = async move {
        let proxied = crate::proxy::handle(State(proxy), request, trace.as_ref());
        let mut response = Box::pin(proxied).await;
        let length = hyper::body::Body::size_hint(response.body()).exact();
        if let Some(length) = length
            && !response.headers().contains_key(CONTENT_LENGTH)
        {
            response
                .headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
        if head {
            *response.body_mut() = Body::empty();
        }
        response
    };
    AssertUnwindSafe(call)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            if let Some(trace) = traced_panic {
                trace.outcome("INTERNAL_ERROR");
            }
            panicked(panic)
        })
}

/// A JSON API's router (account or admin) under its body limit, every answer marked
/// `Cache-Control: no-store`: they carry secrets (keys, session tokens, codes) or a
/// customer's figures, which no shared or browser cache may keep. The portal, console and
/// payment webhook routers bound their own bodies and set their own headers.
fn json_api(router: Router<AppState>) -> Router<AppState> {
    router
        .layer(DefaultBodyLimit::max(limits::MAX_BODY_BYTES))
        .layer(middleware::map_response(no_store))
}

async fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Anything not routed: the proxy for its prefixes, else 404.
async fn fallback(
    state: axum::extract::State<crate::proxy::ProxyState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    if crate::proxy::path::prefix_of(request.uri().path()).is_some() {
        crate::proxy::handle(state, request, None).await
    } else {
        ApiError::NotFound.into_response()
    }
}

/// A known path with another method: `405`, axum adding the `Allow` header that lists the
/// methods the path takes (SPEC §3.1, third contract round). Only a route's own method
/// router calls this, so a 404 never carries `Allow`.
async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// The metrics listener of `tollgate worker`, which has no public listener: `/metrics`
/// and the probes, `/readyz` asking the database.
pub fn worker_router(db: sqlx::PgPool) -> Router {
    let schema = ops::SchemaSeen::default();
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route(
            "/readyz",
            get(move |db| ops::readyz_of_pool(db, schema.clone())),
        )
        .with_state(db)
        .merge(metrics_router())
}

/// The router of the metrics listener: `/metrics` only.
pub fn metrics_router() -> Router {
    let handle = crate::telemetry::prometheus();
    Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move {
                (
                    StatusCode::OK,
                    [("content-type", "text/plain; version=0.0.4")],
                    handle.render(),
                )
            }
        }),
    )
}
