//! Loading the layers: files, profile, `--config`, environment; then validation.

use std::path::PathBuf;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use secrecy::ExposeSecret;
use serde::Deserialize;

use super::{Config, LOCAL_PROFILE};

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
        // Likewise an empty signing secret means no payment webhooks.
        if config
            .billing
            .stripe_webhook_secret
            .as_ref()
            .is_some_and(|t| t.expose_secret().trim().is_empty())
        {
            config.billing.stripe_webhook_secret = None;
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
        if self.usage_check.queue_capacity == 0
            || self.usage_check.batch_size == 0
            || self.usage_check.concurrent_batches == 0
            || self.usage_check.account_lanes == 0
        {
            return fail(
                "usage_check.queue_capacity, batch_size, concurrent_batches and account_lanes \
                 must be at least 1"
                    .into(),
            );
        }
        if self.usage.free_monthly_calls < 0 {
            return fail("usage.free_monthly_calls must not be negative".into());
        }
        if self.throttle.refresh_interval_ms == 0 || self.throttle.reconcile_interval_ms == 0 {
            return fail("throttle intervals must be positive".into());
        }
        if self.throttle.kv_budget_window_ms == 0 {
            return fail("throttle.kv_budget_window_ms must be positive".into());
        }
        for route in &self.pricing.routes {
            if !route.prefix.starts_with('/') || !(0..=1_000_000).contains(&route.cost) {
                return fail(format!(
                    "pricing.routes: prefix `{}` must start with / and cost {} must be 0 to 1000000",
                    route.prefix, route.cost
                ));
            }
        }
        if let Some(name) = &self.pricing.cost_header
            && axum::http::HeaderName::from_bytes(name.as_bytes()).is_err()
        {
            return fail(format!(
                "pricing.cost_header `{name}` is not a valid header name"
            ));
        }
        if self.account.login_failures_per_hour == 0 {
            return fail("account.login_failures_per_hour must be at least 1".into());
        }
        if let Err(problem) = super::plans::validate_plans(&self.plans) {
            return fail(problem);
        }
        // PostgreSQL reads a lock_timeout of 0 as "wait for ever".
        if self.usage_check.lock_timeout_ms == 0 {
            return fail("usage_check.lock_timeout_ms must be positive".into());
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
pub(super) fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
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
