//! The sub-state authentication takes from the application's state (axum `FromRef`):
//! what the principals read, so `auth` imports none of the routers' state.

use std::sync::Arc;

use sqlx::PgPool;

use super::account_limits::AccountLimits;
use super::key_cache::KeyCache;
use crate::config::Config;

/// What the principals read: the database, this replica's key cache and the
/// configuration (the API-key header, the admin token). One shared allocation, so a
/// request's copy costs one reference count.
#[derive(Clone)]
pub struct AuthState(Arc<AuthParts>);

pub struct AuthParts {
    pub db: PgPool,
    pub keys: KeyCache,
    pub config: Arc<Config>,
    /// The fleet's abuse limits (failed admin-token authentications).
    pub limits: AccountLimits,
}

impl AuthState {
    pub fn new(parts: AuthParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl std::ops::Deref for AuthState {
    type Target = AuthParts;

    fn deref(&self) -> &AuthParts {
        &self.0
    }
}
