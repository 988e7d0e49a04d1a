//! The principals handlers ask for: who a request was authenticated as.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use super::key_policy::KeyPolicy;

/// A caller authenticated by an API key.
#[derive(Debug, Clone)]
pub struct ApiKeyPrincipal {
    pub account_id: i64,
    pub key_id: i64,
    /// The key's expiry, scopes and rate limit; `None` for an unrestricted key.
    pub policy: Option<Arc<KeyPolicy>>,
    /// The key's last-use cell (epoch seconds of its last forwarded call).
    pub used: Arc<AtomicI64>,
    /// The key's `monthly_limit` when this lookup read the key's row (`Some(None)`: no
    /// limit), so the per-key limit view need not read it again; `None` when the cache
    /// answered.
    pub limit_read: Option<Option<i64>>,
}

/// A caller authenticated by a login session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPrincipal {
    pub account_id: i64,
}

/// A customer by session or by API key, for routes that take either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountPrincipal {
    pub account_id: i64,
}
