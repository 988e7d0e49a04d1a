//! Who may use the admin API: the holder of `admin.token`. Failed authentications count
//! per client address, fleet-wide (`admin.failures_per_hour`, SPEC §21): past the limit
//! every request from that address is `429`, even with the right token, so the token
//! cannot be guessed at any speed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRef, FromRequestParts};
use axum::http::request::Parts;
use chrono::Utc;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

use super::refusal::{Refusal, refused};
use super::state::AuthState;
use super::token::bearer;
use crate::error::ApiError;

/// Whether `given` is the admin token. Comparing digests keeps the comparison time
/// independent of the token (the admin API's bearer and the console's sign-in).
pub fn admin_token_matches(expected: &SecretString, given: &str) -> bool {
    Sha256::digest(given.as_bytes()) == Sha256::digest(expected.expose_secret().as_bytes())
}

/// The operator, holding `admin.token`.
#[derive(Debug, Clone, Copy)]
pub struct AdminPrincipal;

impl<S> FromRequestParts<S> for AdminPrincipal
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    /// With no `admin.token` configured the admin API does not exist (404).
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let state = AuthState::from_ref(state);
        let Some(expected) = &state.config.admin.token else {
            return Err(ApiError::NotFound);
        };
        let ip = client_address(parts, &state);
        let now = Utc::now();
        if bearer(&parts.headers).is_some_and(|given| admin_token_matches(expected, given)) {
            state.limits.admin_allowed(ip, now).await?;
            return Ok(AdminPrincipal);
        }
        if let Some(suppressed) = refused(Refusal::AdminToken) {
            tracing::warn!(suppressed, "admin token missing or wrong: request refused");
        }
        state.limits.admin_failed(ip, now).await?;
        Err(ApiError::Unauthorized)
    }
}

/// The address a request's limits count under: its TCP peer, or behind
/// `server.trusted_proxies` the client they forwarded for (`0.0.0.0` when no peer is
/// known).
pub fn client_address(parts: &Parts, state: &AuthState) -> IpAddr {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |peer| peer.0.ip());
    crate::client_ip::client_ip(peer, &parts.headers, &state.config.server.trusted_proxies)
}
