//! The operator console (SPEC §10): `/console/`, web pages served by the gateway itself,
//! present only when `admin.token` is set.
//!
//! Operators sign in with the admin token ([`signin`]) and get a session kept in
//! PostgreSQL ([`session`]); every page without a valid session redirects to the
//! sign-in page, and every form that changes something carries the session's CSRF
//! token. The pages read what the admin API reads and write through the same services:
//! the [`overview`], the account list ([`accounts`]) and one [`account`] with its
//! [`forms`]. HTML is rendered by maud, charts are SVG made in Rust ([`chart`]), and the
//! stylesheet is compiled in ([`page`]): no script, nothing loaded from elsewhere.

pub mod account;
pub mod accounts;

pub mod forms;
pub mod overview;
pub mod page;
pub mod session;
pub mod signin;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::response::Redirect;
use axum::routing::{any, get, post};

use crate::state::AppState;

/// Largest form body.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The console's routes, each answer with the console's security headers.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(overview::page))
        .route(page::STYLESHEET, get(page::stylesheet))
        .route(session::SIGN_IN, get(signin::page).post(signin::sign_in))
        .route("/console/sign-out", post(signin::sign_out))
        .route("/console/accounts", get(accounts::page))
        .route("/console/accounts/{account_id}", get(account::page))
        .route(
            "/console/accounts/{account_id}/subscriptions",
            post(forms::add_subscription),
        )
        .route(
            "/console/accounts/{account_id}/top-ups",
            post(forms::add_top_up),
        )
        .route("/console/{*rest}", any(page::unknown))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(middleware::from_fn(page::security_headers))
}
