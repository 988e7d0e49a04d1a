//! What a reload cannot put in force (SPEC §20).
//!
//! A reload replaces the catalogue, prices, entitlements, the free grant's terms, the
//! webhook thresholds and the log filter ([`RELOADABLE`]). Everything else is read once,
//! at start: listeners, the database pool, the usage transport, the upstream client,
//! the throttler, the admin token, the analytics bound, trace export. When a reloaded
//! configuration differs there, the reload still applies what it can and the operator is
//! told which sections wait for a restart, by name only: several hold secrets.

use std::fmt::Debug;

use secrecy::{ExposeSecret, SecretString};

use super::settings::Config;

/// The keys a reload puts in force, as named in the files.
pub const RELOADABLE: [&str; 7] = [
    "plans",
    "pricing",
    "entitlements",
    "usage.free_features",
    "usage.free_rate_limit",
    "notify.thresholds",
    "log.filter",
];

/// The sections and keys read only at start whose value differs between `running` and
/// `loaded`, named as in the files; empty when a reload from `running` to `loaded` puts
/// every change in force.
pub fn restart_needed(running: &Config, loaded: &Config) -> Vec<&'static str> {
    let (a, b) = (running, loaded);
    let mut changed: Vec<&'static str> = [
        ("server", differs(&a.server, &b.server)),
        (
            "database",
            differs(&a.database, &b.database) || secret_differs(&a.database.url, &b.database.url),
        ),
        (
            "upstream",
            differs(&a.upstream, &b.upstream)
                || secrets_differ(&a.upstream.shared_secret, &b.upstream.shared_secret),
        ),
        (
            "admin",
            differs(&a.admin, &b.admin) || secrets_differ(&a.admin.token, &b.admin.token),
        ),
        ("account", differs(&a.account, &b.account)),
        ("key_cache", differs(&a.key_cache, &b.key_cache)),
        ("throttle", differs(&a.throttle, &b.throttle)),
        ("usage_check", differs(&a.usage_check, &b.usage_check)),
        (
            "usage.free_monthly_calls",
            a.usage.free_monthly_calls != b.usage.free_monthly_calls,
        ),
        (
            "nats",
            differs(&a.nats, &b.nats) || secret_differs(&a.nats.url, &b.nats.url),
        ),
        (
            "cloudflare",
            differs(&a.cloudflare, &b.cloudflare)
                || secrets_differ(&a.cloudflare.api_token, &b.cloudflare.api_token),
        ),
        (
            "billing",
            differs(&a.billing, &b.billing)
                || secrets_differ(
                    &a.billing.stripe_webhook_secret,
                    &b.billing.stripe_webhook_secret,
                )
                || secrets_differ(&a.billing.stripe_api_key, &b.billing.stripe_api_key),
        ),
        (
            "notify",
            differs(
                &a.notify.without_thresholds(),
                &b.notify.without_thresholds(),
            ) || secrets_differ(&a.notify.webhook_secret, &b.notify.webhook_secret),
        ),
        ("log.format", a.log.format != b.log.format),
        ("analytics", differs(&a.analytics, &b.analytics)),
        ("telemetry", differs(&a.telemetry, &b.telemetry)),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(name, _)| name)
    .collect();
    // A section added later and not named above still counts: everything but the
    // reloadable keys must be equal.
    if changed.is_empty() && differs(&fixed_part(a), &fixed_part(b)) {
        changed.push("other settings");
    }
    changed
}

/// `config` less what a reload puts in force (and less where it was read from).
fn fixed_part(config: &Config) -> Config {
    let mut fixed = config.clone();
    fixed.plans.clear();
    fixed.pricing = Default::default();
    fixed.entitlements = Default::default();
    fixed.usage.free_features.clear();
    fixed.usage.free_rate_limit = None;
    fixed.notify.thresholds.clear();
    fixed.log.filter.clear();
    fixed.sources = None;
    fixed
}

/// Compared as `Debug` shows them, so a key added to a section counts without a word
/// here. Secrets show redacted there: they are compared on their own.
fn differs<T: Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") != format!("{b:?}")
}

fn secret_differs(a: &SecretString, b: &SecretString) -> bool {
    a.expose_secret() != b.expose_secret()
}

fn secrets_differ(a: &Option<SecretString>, b: &Option<SecretString>) -> bool {
    a.as_ref().map(ExposeSecret::expose_secret) != b.as_ref().map(ExposeSecret::expose_secret)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{PlanConfig, RoutePrice};

    #[test]
    fn what_a_reload_applies_needs_no_restart() {
        let running = Config::default();
        let mut loaded = running.clone();
        loaded.plans.push(PlanConfig {
            name: "pro".into(),
            monthly_allowance: 10,
            daily_allowance: None,
            enforcement: Default::default(),
            price_id: None,
            checkout_url: None,
            features: vec![],
            rate_limit: None,
            ..PlanConfig::default()
        });
        loaded.pricing.routes.push(RoutePrice {
            prefix: "/vedic/v1/".into(),
            cost: 2,
        });
        loaded.usage.free_features = vec!["basic".into()];
        loaded.notify.thresholds = vec![50];
        loaded.log.filter = "debug".into();
        assert_eq!(restart_needed(&running, &loaded), Vec::<&str>::new());
    }

    #[test]
    fn settings_read_at_start_are_named_by_section_never_by_value() {
        let running = Config::default();
        let mut loaded = running.clone();
        loaded.server.max_connections = 5;
        loaded.usage.free_monthly_calls = 1;
        loaded.log.format = crate::config::LogFormat::Json;
        loaded.notify.timeout_ms += 1;
        assert_eq!(
            restart_needed(&running, &loaded),
            vec!["server", "usage.free_monthly_calls", "notify", "log.format"]
        );
    }

    #[test]
    fn a_changed_secret_counts_though_debug_output_hides_it() {
        let mut running = Config::default();
        running.admin.token = Some("old-token".to_owned().into());
        let mut loaded = running.clone();
        loaded.admin.token = Some("new-token".to_owned().into());
        loaded.database.url = "postgres://elsewhere/tollgate".to_owned().into();
        loaded.billing.stripe_api_key = Some("sk_new".to_owned().into());
        let changed = restart_needed(&running, &loaded);
        assert_eq!(changed, vec!["database", "admin", "billing"]);
        assert!(!format!("{changed:?}").contains("new-token"));
    }
}
