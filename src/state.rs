//! The shared application state every handler reaches through `State<AppState>`.
//!
//! A leaf of the request path: it names the services the routers use and imports no
//! router, so handlers depend on it and never on the code that wires them
//! ([`crate::startup`]).

use std::sync::Arc;

use axum::extract::FromRef;
use sqlx::PgPool;

use crate::accounts::credentials::Credentials;
use crate::accounts::last_used::LastUsed;
use crate::auth::account_limits::AccountLimits;
use crate::auth::key_cache::KeyCache;
use crate::auth::password::Passwords;
use crate::auth::{AuthParts, AuthState};
use crate::config::{Catalogue, Config};
use crate::proxy::entitlements::Entitlements;
use crate::proxy::pricing::Pricing;
use crate::proxy::upstream::Upstream;
use crate::proxy::{ProxyParts, ProxyState};
use crate::reload::Reloader;
use crate::throttle::Throttler;
use crate::throttle::minute::MinuteWindows;
use crate::throttle::rate::RateLimits;
use crate::usage::accounting::UsagePublisher;
use crate::usage::analytics::RouteBook;
use crate::usage::key_limits::KeyLimits;
use crate::usage::series::PastDays;
use crate::usage::standing::QuotaView;
use crate::usage::subscriptions::Allocation;

/// What every handler can reach: one shared allocation, so the router's per-request
/// clones cost one reference count.
#[derive(Clone)]
pub struct AppState(Arc<Parts>);

/// The services, and the sub-state authentication takes (built once, from the same
/// services).
struct Parts {
    shared: Arc<Shared>,
    auth: AuthState,
    proxy: ProxyState,
}

/// The services behind [`AppState`].
pub struct Shared {
    /// The configuration loaded at start. What a reload changes is read from its live
    /// holders instead: [`Shared::catalogue`], the proxy's prices and entitlements.
    pub config: Arc<Config>,
    /// The plan catalogue and the free grant's terms, as the last reload left them.
    pub catalogue: Catalogue,
    /// Reads the configuration again (`POST /admin/v1/reload`, `SIGHUP`).
    pub reloader: Arc<Reloader>,
    /// How calls' routes are named (SPEC §18): analytics and span names.
    pub routes: Arc<RouteBook>,
    pub db: PgPool,
    pub usage: UsagePublisher,
    pub throttler: Throttler,
    /// Each calling account's standing, for quota headers and hard limits.
    pub quota: QuotaView,
    /// Per-key monthly limits of this replica's calls.
    pub key_limits: KeyLimits,
    /// Activations and top-ups.
    pub allocation: Allocation,
    /// API-key lookups of this replica (disabled: every call asks PostgreSQL).
    pub keys: KeyCache,
    /// The bounded gate of password hashing on this replica.
    pub passwords: Passwords,
    /// Signup, login, redemption and admin-token limits, kept fleet-wide.
    pub limits: AccountLimits,
    /// The console overview's calls per day of the days before today.
    pub past_days: PastDays,
    /// This replica's buckets of the rate limits per second.
    pub rates: RateLimits,
    /// This replica's windows of units per minute (SPEC §20).
    pub minutes: MinuteWindows,
    /// Keys' last proxied calls, written every 30 s.
    pub last_used: LastUsed,
}

impl AppState {
    /// The state over `shared`, with the upstream client, call prices and entitlements
    /// only the proxy uses.
    pub fn new(
        shared: Shared,
        upstream: Arc<Upstream>,
        pricing: Arc<Pricing>,
        entitlements: Arc<Entitlements>,
    ) -> Self {
        let auth = AuthState::new(AuthParts {
            db: shared.db.clone(),
            keys: shared.keys.clone(),
            config: shared.config.clone(),
            limits: shared.limits.clone(),
        });
        let proxy = ProxyState::new(ProxyParts {
            config: shared.config.clone(),
            db: shared.db.clone(),
            keys: shared.keys.clone(),
            upstream,
            pricing,
            key_limits: shared.key_limits.clone(),
            quota: shared.quota.clone(),
            throttler: shared.throttler.clone(),
            usage: shared.usage.clone(),
            entitlements,
            rates: shared.rates.clone(),
            minutes: shared.minutes.clone(),
        });
        Self(Arc::new(Parts {
            shared: Arc::new(shared),
            auth,
            proxy,
        }))
    }

    /// The same state with an upstream connection pool of its own (a connection
    /// worker's).
    pub fn with_own_upstream_pool(&self) -> Self {
        let upstream = Arc::new(self.0.proxy.upstream.with_own_pool());
        Self(Arc::new(Parts {
            shared: self.0.shared.clone(),
            auth: self.0.auth.clone(),
            proxy: self.0.proxy.with_upstream(upstream),
        }))
    }
}

impl FromRef<AppState> for ProxyState {
    fn from_ref(state: &AppState) -> ProxyState {
        state.0.proxy.clone()
    }
}

impl FromRef<AppState> for AuthState {
    fn from_ref(state: &AppState) -> AuthState {
        state.0.auth.clone()
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0.shared
    }
}

impl Shared {
    /// What signing up and in take: the database, the hashing gate, the abuse limits.
    pub fn credentials(&self) -> Credentials<'_> {
        Credentials {
            db: &self.db,
            passwords: &self.passwords,
            limits: &self.limits,
        }
    }

    /// Whether usage is metered (false in local unlimited mode).
    pub fn metering(&self) -> bool {
        self.config.usage_check.enabled
    }
}
