//! The operators' API (`/admin/v1`, SPEC §3.3), behind `admin.token`.

pub mod accounts;
pub mod analytics;
pub mod audit;
pub mod codes;
pub mod exports;
pub(crate) mod handlers;
pub mod reload;
pub mod topups;

use axum::Router;
use axum::routing::{get, post};

use crate::state::AppState;

pub use crate::usage::subscriptions::SubscriptionCreated;
pub use handlers::SubscriptionRequest;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/admin/v1/accounts/{account_id}/subscriptions",
            post(handlers::create_subscription),
        )
        .route(
            "/admin/v1/accounts/{account_id}/usage",
            get(handlers::account_usage),
        )
        .route("/admin/v1/accounts", get(accounts::list_accounts))
        .route(
            "/admin/v1/accounts/{account_id}/usage/daily",
            get(accounts::daily_usage),
        )
        .route(
            "/admin/v1/accounts/{account_id}/analytics",
            get(analytics::account_analytics),
        )
        .route(
            "/admin/v1/accounts/{account_id}/grants",
            post(topups::create_grant),
        )
        .route("/admin/v1/reconcile", post(handlers::reconcile))
        .route("/admin/v1/reload", post(reload::reload))
        .route("/admin/v1/codes", post(codes::create_codes))
        .route("/admin/v1/audit", get(audit::list_audit))
        .route("/admin/v1/usage/export", get(exports::usage_export))
        .route(
            "/admin/v1/accounts/{account_id}/exports",
            get(exports::account_exports),
        )
}
