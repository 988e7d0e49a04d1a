//! The client address a request's abuse limits count under.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

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
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |peer| peer.0.ip());
        Ok(ClientIp(crate::client_ip::client_ip(
            peer,
            &parts.headers,
            &state.config.server.trusted_proxies,
        )))
    }
}
