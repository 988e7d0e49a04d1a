//! The customer-facing account API (`/account/v1`, SPEC §3.2).
//!
//! Signup, login, API-key management and the usage report, each a thin handler over
//! PostgreSQL. Grants and usage figures come from [`crate::usage`].

pub mod auth;
pub(crate) mod handlers;
pub mod password;
pub mod token;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};

use crate::app::AppState;

pub use handlers::{
    KeyCreated, KeySummary, LoginRequest, LoginResponse, SignupRequest, SignupResponse,
};

/// Largest JSON body the account API reads.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/account/v1/signup", post(handlers::signup))
        .route("/account/v1/login", post(handlers::login))
        .route("/account/v1/usage", get(handlers::usage))
        .route(
            "/account/v1/keys",
            post(handlers::create_key).get(handlers::list_keys),
        )
        .route("/account/v1/keys/{key_id}", delete(handlers::revoke_key))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}
