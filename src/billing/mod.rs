//! Payment activation (SPEC §11): Stripe's webhooks turn payments into subscriptions.
//!
//! [`signature`] checks `Stripe-Signature` (pure), [`event`] reads the event types that
//! matter (pure), [`apply`] does what each one means inside the transaction that
//! records it, through the allocation service, and [`webhook`] is the route. The route
//! exists only when `billing.stripe_webhook_secret` is set. Operators' guide:
//! `docs/billing.md`.

pub mod apply;
pub mod event;
pub mod outcome;
pub mod signature;
pub mod webhook;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::post;

use crate::state::AppState;

/// Largest event body read (`413` past it), as the OpenAPI document promises (the JSON
/// APIs' bound, 16 KiB); Stripe's events of the types read here are a few KiB.
pub const MAX_EVENT_BYTES: usize = 16 * 1024;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/billing/v1/stripe", post(webhook::stripe_webhook))
        .layer(DefaultBodyLimit::max(MAX_EVENT_BYTES))
}
