//! Validation of a loaded configuration: every key's range and the rules between keys,
//! each refusal one line naming the key.

use secrecy::ExposeSecret;

use super::load::ConfigError;
use super::settings::{Config, UsageTransport};

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let fail = |msg: String| Err(ConfigError(msg));
        self.billing.validate().map_err(ConfigError)?;
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
        for (key, value) in [
            ("upstream.timeout_ms", self.upstream.timeout_ms),
            (
                "server.header_read_timeout_ms",
                self.server.header_read_timeout_ms,
            ),
            ("server.idle_timeout_ms", self.server.idle_timeout_ms),
            ("server.max_connections", self.server.max_connections as u64),
        ] {
            if value == 0 {
                return fail(format!("{key} must be greater than 0"));
            }
        }
        if self.server.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return fail(format!(
                "server.max_connections must be at most {}",
                tokio::sync::Semaphore::MAX_PERMITS
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
        let account = &self.account;
        if account.signups_per_ip_per_hour == 0
            || account.login_failures_per_hour == 0
            || account.max_keys == 0
        {
            return fail(
                "account.signups_per_ip_per_hour, login_failures_per_hour and max_keys must be \
                 at least 1"
                    .into(),
            );
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
        if let Some(problem) = self.telemetry.problem() {
            return fail(problem);
        }
        if !(1..=10_000).contains(&self.analytics.max_routes) {
            return fail("analytics.max_routes must be from 1 to 10000".into());
        }
        if !(10..=3_600_000).contains(&self.analytics.latency_flush_ms) {
            return fail("analytics.latency_flush_ms must be from 10 to 3600000".into());
        }
        for route in &self.entitlements.routes {
            if !route.prefix.starts_with('/') {
                return fail(format!(
                    "entitlements.routes: prefix `{}` must start with /",
                    route.prefix
                ));
            }
            if let Some(problem) = crate::plan::feature_problem(&route.feature) {
                return fail(format!(
                    "entitlements.routes: `{}`: {problem}",
                    route.prefix
                ));
            }
        }
        if let Err(problem) =
            crate::plan::checked_features(self.usage.free_features.clone(), "usage.free_features")
        {
            return fail(problem);
        }
        if let Some(Err(problem)) = self
            .usage
            .free_rate_limit
            .map(|r| r.checked("usage.free_rate_limit"))
        {
            return fail(problem);
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
        if let Err(problem) = super::notify::validate_notify(&self.notify) {
            return fail(problem);
        }
        // PostgreSQL reads a lock_timeout of 0 as "wait for ever".
        if self.usage_check.lock_timeout_ms == 0 {
            return fail("usage_check.lock_timeout_ms must be positive".into());
        }
        self.validate_nats()
    }

    /// The JetStream transport's keys; checked whatever the transport, so a typo is
    /// found before the day the transport is switched on.
    fn validate_nats(&self) -> Result<(), ConfigError> {
        let fail = |msg: String| Err(ConfigError(msg));
        let nats = &self.nats;
        if !self.usage_check.consume && self.usage_check.transport == UsageTransport::Memory {
            return fail(
                "usage_check.consume = false needs usage_check.transport = \"jetstream\" \
                 (with \"memory\" this process's events would never be accounted)"
                    .into(),
            );
        }
        if nats.url.expose_secret().trim().is_empty() {
            return fail("nats.url must not be empty".into());
        }
        for (key, name) in [
            ("nats.stream", &nats.stream),
            ("nats.consumer", &nats.consumer),
        ] {
            if !is_nats_name(name) {
                return fail(format!(
                    "{key} `{name}` must be non-empty, without spaces, `.`, `*` or `>`"
                ));
            }
        }
        let subject_ok = !nats.subject.is_empty()
            && nats
                .subject
                .split('.')
                .all(|token| is_nats_name(token) && !token.is_empty());
        if !subject_ok {
            return fail(format!(
                "nats.subject `{}` must be dot-separated tokens without spaces or wildcards",
                nats.subject
            ));
        }
        if nats.ack_wait_ms < 500 {
            return fail("nats.ack_wait_ms must be at least 500".into());
        }
        if nats.max_ack_pending < 1 || nats.publish_concurrency == 0 {
            return fail(
                "nats.max_ack_pending and nats.publish_concurrency must be at least 1".into(),
            );
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

    /// The checks of `tollgate worker`, which only consumes what other processes publish.
    pub fn validate_for_worker(&self) -> Result<(), ConfigError> {
        if self.usage_check.transport != UsageTransport::Jetstream {
            return Err(ConfigError(
                "tollgate worker needs usage_check.transport = \"jetstream\"; with \"memory\" \
                 usage events never leave the process that serves the call"
                    .into(),
            ));
        }
        if !self.usage_check.enabled {
            return Err(ConfigError(
                "tollgate worker needs usage_check.enabled = true (it would discard usage events)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// A stream or consumer name NATS accepts (also each token of a subject).
fn is_nats_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|c| !c.is_ascii_whitespace() && !c.is_ascii_control() && !b".*>".contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nats_names_refuse_separators_and_wildcards() {
        assert!(is_nats_name("TOLLGATE_USAGE"));
        assert!(is_nats_name("tollgate-accounting"));
        for bad in ["", "a.b", "a*", ">", "a b", "a\tb"] {
            assert!(!is_nats_name(bad), "{bad:?}");
        }
    }
}
