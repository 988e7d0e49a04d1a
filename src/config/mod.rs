//! Layered, typed configuration (SPEC §2).
//!
//! Layers, later wins: built-in defaults → `config/default.toml` → `config/<profile>.toml`
//! (when `TOLLGATE_PROFILE` is set) → `--config FILE` → `TOLLGATE__<SECTION>__<KEY>`
//! environment variables. Every struct refuses unknown keys, and every problem is
//! reported as one line before anything starts. Secrets are `SecretString`s, so they
//! never reach logs or `Debug` output. A running gateway can read the layers again
//! (SPEC §20): [`Catalogue`] holds the plan catalogue a reload replaces, and
//! [`restart_needed`] names what a reload cannot apply.

mod catalogue;
mod changes;
mod de;
mod load;
mod notify;
mod plans;
#[cfg(test)]
mod prop_tests;
mod settings;
mod sources;
mod validate;

pub use catalogue::{Catalogue, Plans};
pub use changes::{RELOADABLE, restart_needed};
pub use load::ConfigError;
pub use notify::{NotifyConfig, Webhook};
pub use plans::{BillingConfig, MAX_PLAN_CHARS, PlanConfig, plan_name_problem};
pub use settings::{
    AccountConfig, AdminConfig, AnalyticsConfig, CloudflareConfig, Config, DatabaseConfig,
    EntitlementsConfig, FeatureRoute, KeyCacheConfig, LOCAL_PROFILE, LogConfig, LogFormat,
    MarkerStoreKind, NatsConfig, PricingConfig, RoutePrice, ServerConfig, TelemetryConfig,
    ThrottleConfig, UpstreamConfig, UsageCheckConfig, UsageConfig, UsageTransport,
};
pub use sources::Sources;
