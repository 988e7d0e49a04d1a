//! The customer-facing account API (`/account/v1`, SPEC §3.2).
//!
//! Signup, login, API-key management, the usage report, the plan catalogue, code
//! redemption and the account's audit log, each a thin handler over the accounts domain
//! ([`crate::accounts`]), with the fleet's abuse limits of [`limits`]. Grants and usage
//! figures come from [`crate::usage`]; the audit log from [`crate::audit`].

pub mod analytics;
pub mod audit;
pub mod entitlements;
pub mod key_limit;
pub mod keys;
pub mod plans;
pub mod redeem;
pub mod signup;
pub mod usage;

use axum::Router;
use axum::routing::{delete, get, post};

use crate::state::AppState;

pub use keys::{KeyCreated, KeySummary};
pub use signup::{LoginRequest, LoginResponse, SignupRequest, SignupResponse};

pub use crate::auth::account_limits as limits;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/account/v1/signup", post(signup::signup))
        .route("/account/v1/login", post(signup::login))
        .route("/account/v1/usage", get(usage::usage))
        .route(
            "/account/v1/keys",
            post(keys::create_key).get(keys::list_keys),
        )
        .route(
            "/account/v1/keys/{key_id}",
            delete(keys::revoke_key).patch(key_limit::patch_key),
        )
        .route("/account/v1/keys/{key_id}/roll", post(keys::roll_key))
        .route("/account/v1/entitlements", get(entitlements::entitlements))
        .route("/account/v1/analytics", get(analytics::analytics))
        .route("/account/v1/plans", get(plans::list_plans))
        .route("/account/v1/redeem", post(redeem::redeem))
        .route("/account/v1/audit", get(audit::list_audit))
}
