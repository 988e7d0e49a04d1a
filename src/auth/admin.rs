//! Who may use the admin API: the holder of `admin.token`.

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
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
        if bearer(&parts.headers).is_some_and(|given| admin_token_matches(expected, given)) {
            return Ok(AdminPrincipal);
        }
        if let Some(suppressed) = refused(Refusal::AdminToken) {
            tracing::warn!(suppressed, "admin token missing or wrong: request refused");
        }
        Err(ApiError::Unauthorized)
    }
}
