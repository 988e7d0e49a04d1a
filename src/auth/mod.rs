//! Who is calling: API-key, session, account and admin principals.
//!
//! Each principal is a `FromRequestParts` extractor over [`AppState`]; handlers name the
//! principal they need and never see a credential. Token format and hashing live in
//! [`token`], password hashing in [`password`], the per-replica key cache in
//! [`key_cache`], failed-attempt limits in [`limits`]; refusals of unauthenticated
//! requests are counted and sparingly logged by [`refusal`].

pub mod admin;
pub mod api_key;
pub mod key_cache;
pub mod limits;
pub mod password;
pub mod principal;
pub mod refusal;
pub mod session;
pub mod token;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ApiError;
use crate::state::AppState;

pub use admin::AdminPrincipal;
use api_key::authenticate_key;
pub use principal::{AccountPrincipal, ApiKeyPrincipal, SessionPrincipal};
use session::authenticate_session;
use token::bearer;

impl FromRequestParts<AppState> for ApiKeyPrincipal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        authenticate_key(
            &state.db,
            &state.keys,
            &parts.headers,
            &state.config.upstream.key_header,
        )
        .await
    }
}

impl FromRequestParts<AppState> for SessionPrincipal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        authenticate_session(&state.db, &parts.headers).await
    }
}

impl FromRequestParts<AppState> for AccountPrincipal {
    type Rejection = ApiError;

    /// A bearer session wins when one is sent; otherwise the API key header is tried.
    /// Like every account route, a bad or missing credential is `UNAUTHORIZED`, here
    /// with a message naming both credentials the route takes.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key_header = state.config.upstream.key_header.as_str();
        let refused = || ApiError::SessionOrKeyRequired(key_header.to_owned());
        if bearer(&parts.headers).is_some() {
            return match authenticate_session(&state.db, &parts.headers).await {
                Ok(session) => Ok(AccountPrincipal {
                    account_id: session.account_id,
                }),
                Err(ApiError::Unauthorized) => Err(refused()),
                Err(other) => Err(other),
            };
        }
        if !parts.headers.contains_key(key_header) {
            return Err(refused());
        }
        match authenticate_key(&state.db, &state.keys, &parts.headers, key_header).await {
            Ok(key) => Ok(AccountPrincipal {
                account_id: key.account_id,
            }),
            Err(ApiError::InvalidApiKey) => Err(refused()),
            Err(other) => Err(other),
        }
    }
}
