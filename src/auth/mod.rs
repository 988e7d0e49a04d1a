//! Who is calling: API-key, session, account and admin principals.
//!
//! Each principal is a `FromRequestParts` extractor over any state that gives an
//! [`AuthState`] (axum `FromRef`): what authentication reads, and nothing of the routers'
//! state. Handlers name the principal they need and never see a credential. Token format and hashing live in
//! [`token`], password hashing in [`password`], the per-replica key cache in
//! [`key_cache`], the fleet's attempt limits in [`attempts`] (the account, admin and
//! console sign-in rules in [`account_limits`]); refusals of unauthenticated
//! requests are counted and sparingly logged by [`refusal`].

pub mod account_limits;
pub mod admin;
pub mod api_key;
pub mod attempts;
pub mod key_cache;
pub mod key_policy;
pub mod limits;
pub mod password;
pub mod principal;
pub mod refusal;
pub mod session;
pub mod state;
pub mod token;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;

use crate::error::ApiError;

pub use admin::AdminPrincipal;
use api_key::authenticate_key;
pub use principal::{AccountPrincipal, ApiKeyPrincipal, SessionPrincipal};
use session::authenticate_session;
pub use state::{AuthParts, AuthState};
use token::bearer;

impl<S> FromRequestParts<S> for ApiKeyPrincipal
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let state = AuthState::from_ref(state);
        authenticate_key(
            &state.db,
            &state.keys,
            &parts.headers,
            &state.config.upstream.key_header,
        )
        .await
    }
}

impl<S> FromRequestParts<S> for SessionPrincipal
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        authenticate_session(&AuthState::from_ref(state).db, &parts.headers).await
    }
}

impl<S> FromRequestParts<S> for AccountPrincipal
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    /// A bearer session wins when one is sent; otherwise the API key header is tried.
    /// Like every account route, a bad or missing credential is `UNAUTHORIZED`, here
    /// with a message naming both credentials the route takes.
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let state = AuthState::from_ref(state);
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
