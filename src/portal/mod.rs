//! The customer portal (SPEC §12): `/portal/`, web pages for API customers, always
//! present, served by the gateway itself.
//!
//! Customers sign up or sign in with email and password ([`signin`], through the
//! account API's own handlers and limits) and get the account's login session in a
//! cookie ([`session`]); every page without a valid session redirects to sign-in, and
//! every form carries the session's CSRF token. The pages show the [`overview`] (the
//! usage report and a chart of units per day), the account's [`keys`] and the
//! [`plans`], and write through the functions the account API uses, always with the
//! signed-in account's id. The frame, chart, stylesheet and security headers are the
//! operator console's ([`crate::console`]).

mod key_fields;
pub mod keys;
pub mod overview;
pub mod page;
pub mod plans;
pub mod session;
pub mod signin;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::response::Redirect;
use axum::routing::{get, post};

use crate::state::AppState;
use crate::web::page::{security_headers, stylesheet};

/// Largest form body.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The portal's routes, each answer with the console's security headers.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/portal", get(|| async { Redirect::permanent("/portal/") }))
        .route("/portal/", get(overview::page))
        .route(page::STYLESHEET, get(stylesheet))
        .route(
            session::SIGN_IN,
            get(signin::sign_in_page).post(signin::sign_in),
        )
        .route(
            "/portal/sign-up",
            get(signin::sign_up_page).post(signin::sign_up),
        )
        .route("/portal/sign-out", post(signin::sign_out))
        .route("/portal/keys", get(keys::page).post(keys::create))
        .route("/portal/keys/{key_id}/revoke", post(keys::revoke))
        .route("/portal/keys/{key_id}/limit", post(keys::set_limit))
        .route("/portal/keys/{key_id}/roll", post(keys::roll))
        .route("/portal/plans", get(plans::page))
        .route("/portal/redeem", post(plans::redeem))
        .route("/portal/{*rest}", get(page::unknown).post(page::unknown))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(middleware::from_fn(security_headers))
}
