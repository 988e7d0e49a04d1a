//! Layered, typed configuration (SPEC §2).
//!
//! Layers, later wins: built-in defaults → `config/default.toml` → `config/<profile>.toml`
//! (when `TOLLGATE_PROFILE` is set) → `--config FILE` → `TOLLGATE__<SECTION>__<KEY>`
//! environment variables. Every struct refuses unknown keys, and every problem is
//! reported as one line before anything starts. Secrets are `SecretString`s, so they
//! never reach logs or `Debug` output.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// The profile that turns metering and throttling off for development.
pub const LOCAL_PROFILE: &str = "local";

/// Everything the gateway can be told. Field names are the SPEC's keys.
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
    pub cloudflare: CloudflareConfig,
    pub log: LogConfig,
    /// The value of `TOLLGATE_PROFILE`, if any; not a file key.
    #[serde(skip)]
    pub profile: Option<String>,
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
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:8080".parse().expect("valid default address"),
            tls_cert: None,
            tls_key: None,
            metrics_listen: "127.0.0.1:9090".parse().expect("valid default address"),
            shutdown_grace_ms: 10_000,
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

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    pub token: Option<SecretString>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountConfig {
    /// Lifetime of a login session token.
    #[serde(deserialize_with = "lenient")]
    pub session_ttl_seconds: u64,
}

impl Default for AccountConfig {
    fn default() -> Self {
        Self {
            session_ttl_seconds: 24 * 3600,
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
    /// How long shutdown may spend draining the queue into PostgreSQL.
    #[serde(deserialize_with = "lenient")]
    pub drain_timeout_ms: u64,
}

impl Default for UsageCheckConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            queue_capacity: 10_000,
            batch_size: 1_000,
            drain_timeout_ms: 10_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    #[serde(deserialize_with = "lenient")]
    pub free_monthly_calls: i64,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            free_monthly_calls: 3_000,
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

/// A configuration problem, worded as the one line an operator sees.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(String);

/// The inputs of [`Config::load`], separate from the process so tests can vary them.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Folder holding `default.toml` and `<profile>.toml`.
    pub dir: PathBuf,
    pub profile: Option<String>,
    /// The `--config FILE` layer.
    pub file: Option<PathBuf>,
    /// Environment variables; only `TOLLGATE__*` ones are read.
    pub env: Vec<(String, String)>,
}

impl Sources {
    /// Reads `TOLLGATE_CONFIG_DIR`, `TOLLGATE_PROFILE` and the environment of this process.
    pub fn from_process(file: Option<PathBuf>) -> Self {
        // Variables that are not UTF-8 cannot be ours; skip them rather than panic.
        let env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let dir = lookup(&env, "TOLLGATE_CONFIG_DIR").unwrap_or_else(|| "config".into());
        let profile = lookup(&env, "TOLLGATE_PROFILE").filter(|p| !p.is_empty());
        Self {
            dir: dir.into(),
            profile,
            file,
            env,
        }
    }
}

fn lookup(env: &[(String, String)], name: &str) -> Option<String> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

const ENV_PREFIX: &str = "TOLLGATE__";

impl Config {
    /// Merges every layer and validates the result.
    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        let mut figment = Figment::new();
        let default_file = sources.dir.join("default.toml");
        if default_file.exists() {
            figment = figment.merge(Toml::file_exact(&default_file));
        }
        if let Some(profile) = &sources.profile {
            let file = sources.dir.join(format!("{profile}.toml"));
            if !file.exists() {
                return Err(ConfigError(format!(
                    "profile `{profile}` has no file {}",
                    file.display()
                )));
            }
            figment = figment.merge(Toml::file_exact(file));
        }
        if let Some(file) = &sources.file {
            if !file.exists() {
                return Err(ConfigError(format!(
                    "config file {} does not exist",
                    file.display()
                )));
            }
            figment = figment.merge(Toml::file_exact(file));
        }
        for (name, value) in &sources.env {
            let Some(rest) = strip_prefix_ignore_case(name, ENV_PREFIX) else {
                continue;
            };
            let path = rest
                .split("__")
                .map(str::to_ascii_lowercase)
                .collect::<Vec<_>>();
            if path.len() != 2 || path.iter().any(String::is_empty) {
                return Err(ConfigError(format!(
                    "environment variable {name} is not of the form TOLLGATE__<SECTION>__<KEY>"
                )));
            }
            // Kept as text: typed fields parse it (see `lenient`), text fields keep
            // it exactly (a secret like "0123" or "true" stays as written).
            figment = figment.merge(Serialized::default(&path.join("."), value));
        }
        let mut config: Config = figment
            .extract()
            .map_err(|e| ConfigError(one_line(&e.to_string())))?;
        config.profile = sources.profile.clone();
        // An empty token (e.g. `TOLLGATE__ADMIN__TOKEN=`) means no admin API.
        if config
            .admin
            .token
            .as_ref()
            .is_some_and(|t| t.expose_secret().trim().is_empty())
        {
            config.admin.token = None;
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let fail = |msg: String| Err(ConfigError(msg));
        if self.throttle.admission_percent > 100 {
            return fail(format!(
                "throttle.admission_percent must be 0-100, got {}",
                self.throttle.admission_percent
            ));
        }
        if self.server.tls_cert.is_some() != self.server.tls_key.is_some() {
            return fail("server.tls_cert and server.tls_key must be set together".into());
        }
        if let Err(e) = reqwest::Url::parse(&self.upstream.base_url) {
            return fail(format!("upstream.base_url is not a URL: {e}"));
        }
        if let Err(e) = reqwest::Url::parse(&self.cloudflare.api_base) {
            return fail(format!("cloudflare.api_base is not a URL: {e}"));
        }
        if axum::http::HeaderName::from_bytes(self.upstream.key_header.as_bytes()).is_err() {
            return fail(format!(
                "upstream.key_header `{}` is not a valid header name",
                self.upstream.key_header
            ));
        }
        if self.database.max_connections == 0 {
            return fail("database.max_connections must be at least 1".into());
        }
        if self.usage_check.queue_capacity == 0 || self.usage_check.batch_size == 0 {
            return fail("usage_check.queue_capacity and batch_size must be at least 1".into());
        }
        if self.usage.free_monthly_calls < 0 {
            return fail("usage.free_monthly_calls must not be negative".into());
        }
        if self.throttle.refresh_interval_ms == 0 || self.throttle.reconcile_interval_ms == 0 {
            return fail("throttle intervals must be positive".into());
        }
        Ok(())
    }

    /// The checks only `serve` needs: it forwards calls, `migrate` does not.
    pub fn validate_for_serve(&self) -> Result<(), ConfigError> {
        if self.upstream.shared_secret.is_none() && !self.is_local_profile() {
            return Err(ConfigError(
                "upstream.shared_secret is required unless TOLLGATE_PROFILE=local".into(),
            ));
        }
        Ok(())
    }

    pub fn is_local_profile(&self) -> bool {
        self.profile.as_deref() == Some(LOCAL_PROFILE)
    }

    pub fn upstream_timeout(&self) -> Duration {
        Duration::from_millis(self.upstream.timeout_ms)
    }
}

/// Deserializes a typed value given natively (TOML) or as text (environment).
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + std::str::FromStr,
    T::Err: std::fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given<T> {
        Typed(T),
        Text(String),
    }
    match Given::<T>::deserialize(deserializer)? {
        Given::Typed(value) => Ok(value),
        // `True`/`FALSE` read like `true`/`false`.
        Given::Text(text) => text
            .trim()
            .parse()
            .or_else(|_| text.trim().to_ascii_lowercase().parse())
            .map_err(|e| serde::de::Error::custom(format!("`{text}`: {e}"))),
    }
}

fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])
}

fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_prefix_is_case_insensitive() {
        assert_eq!(
            strip_prefix_ignore_case("tollgate__server__listen", ENV_PREFIX),
            Some("server__listen")
        );
        assert_eq!(
            strip_prefix_ignore_case("TOLLGATE_PROFILE", ENV_PREFIX),
            None
        );
    }

    #[test]
    fn multi_line_errors_become_one_line() {
        assert_eq!(one_line("a\n  b\n\n"), "a; b");
    }
}
