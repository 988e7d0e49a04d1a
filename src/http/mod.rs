//! The public router: account, portal, admin, billing and operations routes, with the proxy as the
//! fallback for its two prefixes, under one observability middleware.

mod catalogue_doc;
pub mod limits;
mod observe;
pub mod openapi;
mod ops;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::get;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::ApiError;
use crate::state::AppState;

/// Every public route of the gateway. Without `admin.token` the admin API and the
/// operator console do not exist at all: their paths answer 404 like any unknown path;
/// likewise the payment webhook without `billing.stripe_webhook_secret`.
pub fn router(state: AppState) -> Router {
    let schema = ops::SchemaSeen::default();
    let mut routes = Router::new()
        .route("/healthz", get(ops::healthz))
        .route(
            "/readyz",
            get(move |state| ops::readyz(state, schema.clone())),
        )
        .route("/openapi.json", get(openapi::serve))
        .merge(crate::account::router().layer(json_limit()))
        .merge(crate::portal::router());
    if state.config.admin.token.is_some() {
        routes = routes
            .merge(crate::admin::router().layer(json_limit()))
            .merge(crate::console::router());
    }
    if state.config.billing.stripe_webhook_secret.is_some() {
        routes = routes.merge(crate::billing::router());
    }
    routes
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal(anyhow::anyhow!("handler panicked")).into_response()
        }))
        .layer(middleware::from_fn(observe::observe))
        .with_state(state)
}

/// The body limit of the JSON APIs (account and admin); the portal, console and payment
/// webhook routers bound their own bodies.
fn json_limit() -> DefaultBodyLimit {
    DefaultBodyLimit::max(limits::MAX_BODY_BYTES)
}

/// Anything not routed: the proxy for its prefixes, else 404.
async fn fallback(
    state: axum::extract::State<crate::proxy::ProxyState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    if crate::proxy::path::prefix_of(request.uri().path()).is_some() {
        crate::proxy::handle(state, request).await
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
