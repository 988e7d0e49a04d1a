//! The configuration's sections and their defaults; field names are the SPEC's keys.

use std::net::SocketAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use secrecy::SecretString;
use serde::Deserialize;

use super::de::{cidr_list, lenient};
use super::notify::NotifyConfig;
use super::plans::{BillingConfig, PlanConfig};
use crate::plan::{PlanTerms, RateLimitInput};

/// The profile that turns metering and throttling off for development.
pub const LOCAL_PROFILE: &str = "local";

/// Everything the gateway can be told. Field names are the SPEC's keys.
///
/// A running gateway keeps the configuration it started with; the parts a reload
/// replaces (SPEC §20: `plans`, `pricing`, `entitlements`, `usage.free_features` and
/// `usage.free_rate_limit`, `notify.thresholds`, `log.filter`) are read at request time
/// from their live holders ([`super::Catalogue`], the proxy's prices and entitlements,
/// the accountant's thresholds, the log filter), never from here.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub upstream: UpstreamConfig,
    pub admin: AdminConfig,
    pub account: AccountConfig,
    pub key_cache: KeyCacheConfig,
    pub throttle: ThrottleConfig,
    pub usage_check: UsageCheckConfig,
    pub usage: UsageConfig,
    pub nats: NatsConfig,
    pub cloudflare: CloudflareConfig,
    pub pricing: PricingConfig,
    /// Which routes need which plan feature (SPEC §17).
    pub entitlements: EntitlementsConfig,
    /// The plan catalogue (`[[plans]]`) as loaded; requests read the live one,
    /// [`super::Catalogue`].
    pub plans: Vec<PlanConfig>,
    pub billing: BillingConfig,
    /// Threshold webhooks (SPEC §7).
    pub notify: NotifyConfig,
    pub log: LogConfig,
    /// Usage analytics (SPEC §18).
    pub analytics: AnalyticsConfig,
    /// Trace export (SPEC §22).
    pub telemetry: TelemetryConfig,
    /// The value of `TOLLGATE_PROFILE`, if any; not a file key.
    #[serde(skip)]
    pub profile: Option<String>,
    /// The layers this configuration was read from ([`Config::load`]), which a reload
    /// reads again; none for one built in code. Not a file key.
    #[serde(skip)]
    pub sources: Option<super::sources::Sources>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub metrics_listen: SocketAddr,
    /// How long in-flight requests may take to finish after a shutdown signal.
    #[serde(deserialize_with = "lenient")]
    pub shutdown_grace_ms: u64,
    /// How long a connection may take to send a whole request head: from its accept
    /// (TLS handshake included), or from the first byte of its next request. Also the
    /// longest a request body may keep the gateway waiting between two of its pieces.
    #[serde(deserialize_with = "lenient")]
    pub header_read_timeout_ms: u64,
    /// How long a keep-alive connection may sit between requests.
    #[serde(deserialize_with = "lenient")]
    pub idle_timeout_ms: u64,
    /// Client connections served at once; further ones wait in the listen backlog.
    #[serde(deserialize_with = "lenient")]
    pub max_connections: usize,
    /// Peers (load balancers) whose `X-Forwarded-For` is kept and appended to.
    #[serde(deserialize_with = "cidr_list")]
    pub trusted_proxies: Vec<IpNet>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:8080".parse().expect("valid default address"),
            tls_cert: None,
            tls_key: None,
            metrics_listen: "127.0.0.1:9090".parse().expect("valid default address"),
            shutdown_grace_ms: 10_000,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            max_connections: 10_000,
            trusted_proxies: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    pub url: SecretString,
    #[serde(deserialize_with = "lenient")]
    pub max_connections: u32,
    /// `serve` applies pending migrations before it listens.
    #[serde(deserialize_with = "lenient")]
    pub migrate_on_start: bool,
    /// How long a request waits for a pooled connection before answering 503.
    #[serde(deserialize_with = "lenient")]
    pub acquire_timeout_ms: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: SecretString::from("postgres://postgres@127.0.0.1:5432/tollgate"),
            max_connections: 16,
            migrate_on_start: true,
            acquire_timeout_ms: 3_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    pub base_url: String,
    pub shared_secret: Option<SecretString>,
    pub key_header: String,
    #[serde(deserialize_with = "lenient")]
    pub timeout_ms: u64,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            base_url: "http://127.0.0.1:9000".into(),
            shared_secret: None,
            key_header: "x-api-key".into(),
            timeout_ms: 30_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    pub token: Option<SecretString>,
    /// Failed admin-token authentications (admin API and console sign-in) per client
    /// address and hour, fleet-wide; past it even the right token is refused (SPEC §21).
    #[serde(deserialize_with = "lenient")]
    pub failures_per_hour: u32,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            token: None,
            failures_per_hour: 10,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountConfig {
    /// Lifetime of a login session token.
    #[serde(deserialize_with = "lenient")]
    pub session_ttl_seconds: u64,
    /// Signups one client address may make per hour, fleet-wide.
    #[serde(deserialize_with = "lenient")]
    pub signups_per_ip_per_hour: u32,
    /// Failed logins per hour, fleet-wide, per client address and per (email, address);
    /// past it every login from that address (or of that email from it) is refused.
    /// Failures of one email from many addresses only slow its sign-in.
    #[serde(deserialize_with = "lenient")]
    pub login_failures_per_hour: u32,
    /// Unrevoked API keys one account may hold.
    #[serde(deserialize_with = "lenient")]
    pub max_keys: u32,
}

impl Default for AccountConfig {
    fn default() -> Self {
        Self {
            session_ttl_seconds: 24 * 3600,
            signups_per_ip_per_hour: 20,
            login_failures_per_hour: 10,
            max_keys: 20,
        }
    }
}

/// The per-replica cache of API-key lookups (`src/key_cache.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeyCacheConfig {
    /// Off = every proxied call looks its key up in PostgreSQL.
    #[serde(deserialize_with = "lenient")]
    pub enabled: bool,
    /// Most keys held; a full cache starts over.
    #[serde(deserialize_with = "lenient")]
    pub max_entries: usize,
}

impl Default for KeyCacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_entries: 100_000,
        }
    }
}

/// Where exhaustion markers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MarkerStoreKind {
    Cloudflare,
    Memory,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThrottleConfig {
    #[serde(deserialize_with = "lenient")]
    pub enabled: bool,
    #[serde(deserialize_with = "lenient")]
    pub admission_percent: u8,
    pub store: MarkerStoreKind,
    /// How often the marker view is refreshed from the store.
    #[serde(deserialize_with = "lenient")]
    pub refresh_interval_ms: u64,
    /// How long the last good view is trusted while refreshes fail.
    #[serde(deserialize_with = "lenient")]
    pub max_staleness_ms: u64,
    /// How often markers are reconciled with PostgreSQL.
    #[serde(deserialize_with = "lenient")]
    pub reconcile_interval_ms: u64,
    /// Cloudflare API calls this replica may make per budget window.
    #[serde(deserialize_with = "lenient")]
    pub kv_call_budget: u32,
    #[serde(deserialize_with = "lenient")]
    pub kv_budget_window_ms: u64,
    /// Timeout of one Cloudflare API call.
    #[serde(deserialize_with = "lenient")]
    pub kv_timeout_ms: u64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            admission_percent: 20,
            store: MarkerStoreKind::Cloudflare,
            refresh_interval_ms: 10_000,
            max_staleness_ms: 300_000,
            reconcile_interval_ms: 3_600_000,
            kv_call_budget: 1_000,
            kv_budget_window_ms: 300_000,
            kv_timeout_ms: 5_000,
        }
    }
}

/// What calls cost (SPEC §6): route prices and the upstream's own cost header.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PricingConfig {
    /// `[{prefix = "/vedic/v1/...", cost = N}]`; the longest matching prefix wins,
    /// paths matching none cost 1.
    pub routes: Vec<RoutePrice>,
    /// Response header by which the upstream reports a call's cost (never passed on);
    /// also read from a chunked response's trailer (SPEC §20).
    pub cost_header: Option<String>,
    /// Read `event: usage` / `data: {"units": N}` from `text/event-stream` responses and
    /// spend the units as they arrive (SPEC §20).
    #[serde(deserialize_with = "lenient")]
    pub stream_usage: bool,
}

/// `[analytics]`: the rollup of usage per route, key and day (SPEC §18).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnalyticsConfig {
    /// Distinct routes an account's month keeps; calls to any further route count as
    /// `other`.
    #[serde(deserialize_with = "lenient")]
    pub max_routes: usize,
    /// How often the latencies of accounted calls are merged into the rollup (ms, at
    /// least 10): reads see a call's latency within this, its calls and units at once.
    #[serde(deserialize_with = "lenient")]
    pub latency_flush_ms: u64,
}

impl Default for AnalyticsConfig {
    fn default() -> Self {
        Self {
            max_routes: 100,
            latency_flush_ms: 5_000,
        }
    }
}

/// `[entitlements]`: the features routes need (SPEC §17).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EntitlementsConfig {
    /// `[{prefix = "/western/v1/synastry/", feature = "synastry"}]`; the longest
    /// matching prefix wins, paths matching none need no feature.
    pub routes: Vec<FeatureRoute>,
}

/// The feature the calls under one path prefix need.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureRoute {
    pub prefix: String,
    pub feature: String,
}

/// The price of the calls under one path prefix.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutePrice {
    pub prefix: String,
    #[serde(deserialize_with = "lenient")]
    pub cost: i64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageCheckConfig {
    #[serde(deserialize_with = "lenient")]
    pub enabled: bool,
    #[serde(deserialize_with = "lenient")]
    pub queue_capacity: usize,
    /// Most events accounted in one transaction.
    #[serde(deserialize_with = "lenient")]
    pub batch_size: usize,
    /// How long a batch that is not full waits for more events.
    #[serde(deserialize_with = "lenient")]
    pub batch_linger_ms: u64,
    /// Most batches accounted at once, each in its own transaction and connection.
    #[serde(deserialize_with = "lenient")]
    pub concurrent_batches: usize,
    /// Transactions each batch is split into by account, run concurrently.
    #[serde(deserialize_with = "lenient")]
    pub account_lanes: usize,
    /// How long shutdown may spend draining the queue into PostgreSQL.
    #[serde(deserialize_with = "lenient")]
    pub drain_timeout_ms: u64,
    /// How long a batch waits for an account's row lock before the locked accounts'
    /// events are set aside and retried, so only they wait.
    #[serde(deserialize_with = "lenient")]
    pub lock_timeout_ms: u64,
    /// How usage events travel from the proxy to the accounting (SPEC §8).
    pub transport: UsageTransport,
    /// Whether `serve` also runs the accounting consumer; `false` = this replica only
    /// publishes (JetStream transport only).
    #[serde(deserialize_with = "lenient")]
    pub consume: bool,
}

/// How usage events travel from the proxy to the accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageTransport {
    /// The bounded in-process queue: events of a process are accounted by that process.
    #[default]
    Memory,
    /// NATS JetStream (`nats.*`): events outlive the process that published them.
    Jetstream,
}

impl Default for UsageCheckConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            queue_capacity: 10_000,
            batch_size: 1_000,
            batch_linger_ms: 10,
            concurrent_batches: 2,
            account_lanes: 2,
            drain_timeout_ms: 10_000,
            lock_timeout_ms: 1_000,
            transport: UsageTransport::Memory,
            consume: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    #[serde(deserialize_with = "lenient")]
    pub free_monthly_calls: i64,
    /// The free grant's features (SPEC §17).
    pub free_features: Vec<String>,
    /// The free grant's rate limit (SPEC §16); none when absent.
    pub free_rate_limit: Option<RateLimitInput>,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            free_monthly_calls: 3_000,
            free_features: Vec::new(),
            free_rate_limit: None,
        }
    }
}

impl UsageConfig {
    /// The free grant's features and rate limit (checked when the configuration loaded).
    pub fn free_terms(&self) -> PlanTerms {
        PlanTerms {
            features: self.free_features.clone(),
            rate_limit: self
                .free_rate_limit
                .and_then(|r| r.checked("usage.free_rate_limit").ok()),
            budget: crate::plan::Budget::default(),
        }
    }
}

/// The NATS JetStream transport of usage events (`usage_check.transport = "jetstream"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    /// May carry credentials (`nats://user:pass@host:4222`), hence secret.
    pub url: SecretString,
    pub stream: String,
    pub subject: String,
    /// The durable pull consumer every accounting process shares.
    pub consumer: String,
    /// How long a delivered message may stay unacknowledged before JetStream hands it
    /// to another consumer (applied when the consumer is created).
    #[serde(deserialize_with = "lenient")]
    pub ack_wait_ms: u64,
    /// Most messages delivered and not yet acknowledged, over all consuming processes
    /// (applied when the consumer is created). Events set aside on a locked account
    /// count too, so it leaves room for several processes' set-aside bound.
    #[serde(deserialize_with = "lenient")]
    pub max_ack_pending: i64,
    /// Most publishes of one process awaiting the stream's acknowledgement at once.
    #[serde(deserialize_with = "lenient")]
    pub publish_concurrency: usize,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            url: SecretString::from("nats://127.0.0.1:4222"),
            stream: "TOLLGATE_USAGE".into(),
            subject: "tollgate.usage".into(),
            consumer: "tollgate-accounting".into(),
            ack_wait_ms: 30_000,
            max_ack_pending: 50_000,
            publish_concurrency: 256,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CloudflareConfig {
    pub api_base: String,
    pub account_id: Option<String>,
    pub namespace_id: Option<String>,
    pub api_token: Option<SecretString>,
}

impl Default for CloudflareConfig {
    fn default() -> Self {
        Self {
            api_base: "https://api.cloudflare.com/client/v4".into(),
            account_id: None,
            namespace_id: None,
            api_token: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing_subscriber::EnvFilter` directive; `RUST_LOG` wins when set.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".into(),
        }
    }
}

/// `[telemetry]`: trace export over OTLP/HTTP (SPEC §22).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans go to
    /// `<endpoint>/v1/traces`. Unset (or empty) = no trace export.
    pub otlp_endpoint: Option<String>,
    /// The share of new traces sampled, 0 to 1; a call with a `traceparent` follows its
    /// sampled flag instead.
    #[serde(deserialize_with = "lenient")]
    pub sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            sample_ratio: 0.1,
        }
    }
}

impl TelemetryConfig {
    /// What is wrong with the section, in the words of its keys.
    pub fn problem(&self) -> Option<String> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Some(format!(
                "telemetry.sample_ratio must be from 0 to 1, got {}",
                self.sample_ratio
            ));
        }
        let endpoint = self.otlp_endpoint.as_deref()?;
        let url = match reqwest::Url::parse(endpoint) {
            Ok(url) => url,
            Err(e) => return Some(format!("telemetry.otlp_endpoint is not a URL: {e}")),
        };
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Some("telemetry.otlp_endpoint must be an http:// or https:// URL".into());
        }
        // The URL is shown in logs and `Debug`: credentials go in
        // OTEL_EXPORTER_OTLP_HEADERS instead.
        if !url.username().is_empty() || url.password().is_some() {
            return Some(
                "telemetry.otlp_endpoint must not hold credentials (pass them as \
                 OTEL_EXPORTER_OTLP_HEADERS)"
                    .into(),
            );
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Some("telemetry.otlp_endpoint must not have a query or fragment".into());
        }
        None
    }

    /// Where spans are posted: `<otlp_endpoint>/v1/traces`, when export is on.
    pub fn traces_url(&self) -> Option<String> {
        let endpoint = self.otlp_endpoint.as_deref()?;
        Some(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
    }
}
