//! The client address a request's abuse limits count under.

use std::net::IpAddr;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;

use crate::auth::AuthState;
use crate::auth::admin::client_address;
use crate::state::AppState;

/// The address a request's limits count under: its TCP peer, or behind
/// `server.trusted_proxies` the client they forwarded for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = std::convert::Infallible;

    /// A router served without connect info (no peer known) counts as `0.0.0.0`.
    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientIp(client_address(parts, &AuthState::from_ref(state))))
    }
}
