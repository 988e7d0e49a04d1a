//! The sub-state the proxy takes from the application's state (axum `FromRef`): the
//! services one proxied call uses, so `proxy` imports none of the routers' state.

use std::sync::Arc;

use sqlx::PgPool;

use super::entitlements::Entitlements;
use super::pricing::Pricing;
use super::upstream::Upstream;
use crate::auth::key_cache::KeyCache;
use crate::config::Config;
use crate::throttle::Throttler;
use crate::throttle::minute::MinuteWindows;
use crate::throttle::rate::RateLimits;
use crate::usage::accounting::UsagePublisher;
use crate::usage::key_limits::KeyLimits;
use crate::usage::standing::QuotaView;

/// What a proxied call reads. One shared allocation, so a request's copy costs one
/// reference count.
#[derive(Clone)]
pub struct ProxyState(Arc<ProxyParts>);

#[derive(Clone)]
pub struct ProxyParts {
    pub config: Arc<Config>,
    pub db: PgPool,
    /// API-key lookups of this replica.
    pub keys: KeyCache,
    pub upstream: Arc<Upstream>,
    /// What calls cost.
    pub pricing: Arc<Pricing>,
    /// Per-key monthly limits of this replica's calls.
    pub key_limits: KeyLimits,
    /// Each calling account's standing, for quota headers and hard limits.
    pub quota: QuotaView,
    pub throttler: Throttler,
    pub usage: UsagePublisher,
    /// Which routes need which plan feature.
    pub entitlements: Arc<Entitlements>,
    /// This replica's rate-limit buckets.
    pub rates: RateLimits,
    /// This replica's minute windows (SPEC §20).
    pub minutes: MinuteWindows,
}

impl ProxyState {
    pub fn new(parts: ProxyParts) -> Self {
        Self(Arc::new(parts))
    }

    /// The same services with calls sent through `upstream`.
    pub fn with_upstream(&self, upstream: Arc<Upstream>) -> Self {
        Self::new(ProxyParts {
            upstream,
            ..ProxyParts::clone(&self.0)
        })
    }
}

impl std::ops::Deref for ProxyState {
    type Target = ProxyParts;

    fn deref(&self) -> &ProxyParts {
        &self.0
    }
}
