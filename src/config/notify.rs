//! `[notify]`: threshold webhooks (SPEC §2, §7).
//!
//! The contract's keys are `webhook_url`, `webhook_secret` and `thresholds`; webhooks
//! are on when both the URL and the secret are set. The other keys tune delivery
//! (timeouts, the retry schedule, the delivery lease) and are this implementation's own.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use super::de::lenient;

/// `[notify]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// Where events are POSTed; unset = no webhooks.
    pub webhook_url: Option<String>,
    /// The HMAC-SHA256 key of `Tollgate-Signature`; unset = no webhooks.
    pub webhook_secret: Option<SecretString>,
    /// Percentages of the month's allowance (credits excluded), each 1 to 100.
    #[serde(deserialize_with = "percent_list")]
    pub thresholds: Vec<i64>,
    /// How long one delivery attempt may take, connection included.
    #[serde(deserialize_with = "lenient")]
    pub timeout_ms: u64,
    /// The wait after a first failed attempt; each further failure doubles it.
    #[serde(deserialize_with = "lenient")]
    pub retry_initial_ms: u64,
    /// The longest wait between two attempts.
    #[serde(deserialize_with = "lenient")]
    pub retry_max_ms: u64,
    /// How often the delivering process looks for due events, and every other process
    /// for a free delivery lease.
    #[serde(deserialize_with = "lenient")]
    pub poll_interval_ms: u64,
    /// How long the delivery lease outlives its holder's last renewal.
    #[serde(deserialize_with = "lenient")]
    pub lease_ttl_ms: u64,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            webhook_url: None,
            webhook_secret: None,
            thresholds: vec![80, 100],
            timeout_ms: 10_000,
            retry_initial_ms: 10_000,
            retry_max_ms: 3_600_000,
            poll_interval_ms: 1_000,
            lease_ttl_ms: 30_000,
        }
    }
}

/// The webhook's target and key, present only when both are set.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub url: reqwest::Url,
    pub secret: SecretString,
}

impl NotifyConfig {
    /// The webhook when both `webhook_url` and `webhook_secret` are set (validation has
    /// checked the URL).
    pub fn webhook(&self) -> Option<Webhook> {
        let url = reqwest::Url::parse(self.webhook_url.as_deref()?).ok()?;
        Some(Webhook {
            url,
            secret: self.webhook_secret.clone()?,
        })
    }

    /// Whether threshold events are recorded and delivered.
    pub fn enabled(&self) -> bool {
        self.webhook().is_some()
    }

    /// The thresholds as percentages, ascending (validation has checked their range).
    pub fn percentages(&self) -> Vec<u8> {
        let mut list: Vec<u8> = self
            .thresholds
            .iter()
            .filter_map(|t| u8::try_from(*t).ok())
            .collect();
        list.sort_unstable();
        list
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The section less `thresholds`: what a reload cannot change (SPEC §20).
    pub(super) fn without_thresholds(&self) -> Self {
        Self {
            thresholds: Vec::new(),
            ..self.clone()
        }
    }

    /// Blank URLs and secrets mean unset, like the other optional secrets.
    pub(super) fn normalize(&mut self) {
        if self
            .webhook_url
            .as_deref()
            .is_some_and(|u| u.trim().is_empty())
        {
            self.webhook_url = None;
        }
        if self
            .webhook_secret
            .as_ref()
            .is_some_and(|s| s.expose_secret().trim().is_empty())
        {
            self.webhook_secret = None;
        }
    }
}

/// Checks `[notify]`, whether webhooks are on or not, so a mistake is found before the
/// day they are switched on.
pub(super) fn validate_notify(notify: &NotifyConfig) -> Result<(), String> {
    if notify.thresholds.is_empty() {
        return Err("notify.thresholds must list at least one percentage (1-100)".into());
    }
    let mut seen = Vec::with_capacity(notify.thresholds.len());
    for t in &notify.thresholds {
        if !(1..=100).contains(t) {
            return Err(format!(
                "notify.thresholds: {t} is not a percentage from 1 to 100"
            ));
        }
        if seen.contains(t) {
            return Err(format!("notify.thresholds: {t} appears twice"));
        }
        seen.push(*t);
    }
    if let Some(url) = &notify.webhook_url {
        match reqwest::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {}
            Ok(_) => return Err("notify.webhook_url must be an http or https URL".into()),
            Err(e) => return Err(format!("notify.webhook_url is not a URL: {e}")),
        }
    }
    for (key, value) in [
        ("notify.timeout_ms", notify.timeout_ms),
        ("notify.retry_initial_ms", notify.retry_initial_ms),
        ("notify.poll_interval_ms", notify.poll_interval_ms),
    ] {
        if value == 0 {
            return Err(format!("{key} must be greater than 0"));
        }
    }
    if notify.retry_max_ms < notify.retry_initial_ms {
        return Err("notify.retry_max_ms must be at least notify.retry_initial_ms".into());
    }
    // An attempt started just before a renewal must end before the lease can pass to
    // another process, or both could send the same event.
    if notify.lease_ttl_ms <= notify.timeout_ms.saturating_add(notify.poll_interval_ms) {
        return Err(
            "notify.lease_ttl_ms must be more than notify.timeout_ms + notify.poll_interval_ms"
                .into(),
        );
    }
    Ok(())
}

/// Deserializes a list of integers given as a TOML array or, from the environment, as
/// comma-separated text (`80,100`, brackets allowed).
fn percent_list<'de, D>(deserializer: D) -> Result<Vec<i64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        List(Vec<i64>),
        Text(String),
    }
    match Given::deserialize(deserializer)? {
        Given::List(items) => Ok(items),
        Given::Text(text) => text
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<i64>().map_err(|_| {
                    serde::de::Error::custom(format!("`{item}` is not a whole percentage"))
                })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Sources};

    fn with(adjust: impl FnOnce(&mut NotifyConfig)) -> Result<(), String> {
        let mut notify = NotifyConfig::default();
        adjust(&mut notify);
        validate_notify(&notify)
    }

    fn load(env: &[(&str, &str)]) -> Result<Config, String> {
        let sources = Sources {
            dir: "config".into(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        };
        Config::load(&sources).map_err(|e| e.to_string())
    }

    #[test]
    fn the_defaults_are_eighty_and_one_hundred_percent_and_off() {
        let notify = NotifyConfig::default();
        assert_eq!(notify.percentages(), [80, 100]);
        assert!(!notify.enabled());
        assert_eq!(with(|_| {}), Ok(()));
    }

    #[test]
    fn webhooks_are_on_only_when_both_the_url_and_the_secret_are_set() {
        let mut notify = NotifyConfig {
            webhook_url: Some("https://hooks.example.com/tollgate".into()),
            ..Default::default()
        };
        assert!(!notify.enabled());
        notify.webhook_secret = Some(SecretString::from("s3cr3t"));
        assert!(notify.enabled());
        notify.webhook_url = None;
        assert!(!notify.enabled());
    }

    #[test]
    fn empty_duplicate_and_out_of_range_thresholds_are_refused() {
        let err = with(|n| n.thresholds = vec![]).unwrap_err();
        assert!(err.contains("at least one"), "{err}");
        let err = with(|n| n.thresholds = vec![80, 80]).unwrap_err();
        assert_eq!(err, "notify.thresholds: 80 appears twice");
        for bad in [0, 101, -5] {
            let err = with(|n| n.thresholds = vec![50, bad]).unwrap_err();
            assert_eq!(
                err,
                format!("notify.thresholds: {bad} is not a percentage from 1 to 100")
            );
        }
        assert_eq!(with(|n| n.thresholds = vec![100, 1, 50]), Ok(()));
    }

    #[test]
    fn thresholds_are_sorted_whatever_order_they_are_given_in() {
        let notify = NotifyConfig {
            thresholds: vec![100, 50, 90],
            ..Default::default()
        };
        assert_eq!(notify.percentages(), [50, 90, 100]);
    }

    #[test]
    fn a_webhook_url_must_be_http_or_https() {
        let err = with(|n| n.webhook_url = Some("ftp://example.com/x".into())).unwrap_err();
        assert!(err.contains("http or https"), "{err}");
        let err = with(|n| n.webhook_url = Some("not a url".into())).unwrap_err();
        assert!(err.starts_with("notify.webhook_url is not a URL"), "{err}");
    }

    #[test]
    fn a_lease_shorter_than_an_attempt_is_refused() {
        let err = with(|n| {
            n.timeout_ms = 30_000;
            n.lease_ttl_ms = 30_000;
        })
        .unwrap_err();
        assert!(err.contains("notify.lease_ttl_ms"), "{err}");
        let err = with(|n| n.retry_max_ms = 1).unwrap_err();
        assert!(err.contains("notify.retry_max_ms"), "{err}");
    }

    #[test]
    fn thresholds_come_from_the_environment_as_a_comma_separated_list() {
        let config = load(&[("TOLLGATE__NOTIFY__THRESHOLDS", "50, 90,100")]).unwrap();
        assert_eq!(config.notify.percentages(), [50, 90, 100]);
        let config = load(&[("TOLLGATE__NOTIFY__THRESHOLDS", "[75]")]).unwrap();
        assert_eq!(config.notify.percentages(), [75]);
        let err = load(&[("TOLLGATE__NOTIFY__THRESHOLDS", "80,eighty")]).unwrap_err();
        assert!(err.contains("`eighty` is not a whole percentage"), "{err}");
        let err = load(&[("TOLLGATE__NOTIFY__THRESHOLDS", "")]).unwrap_err();
        assert!(err.contains("notify.thresholds must list"), "{err}");
    }

    #[test]
    fn unknown_notify_keys_are_refused() {
        let err = load(&[("TOLLGATE__NOTIFY__THRESHOLD", "80")]).unwrap_err();
        assert!(err.contains("unknown key notify.threshold"), "{err}");
    }

    #[test]
    fn the_secret_never_shows_in_debug_output_and_blank_means_unset() {
        let config = load(&[
            (
                "TOLLGATE__NOTIFY__WEBHOOK_URL",
                "https://hooks.example.com/t",
            ),
            ("TOLLGATE__NOTIFY__WEBHOOK_SECRET", "whsec-very-secret"),
        ])
        .unwrap();
        assert!(config.notify.enabled());
        let debug = format!("{config:?}");
        assert!(!debug.contains("whsec-very-secret"), "{debug}");
        let config = load(&[
            (
                "TOLLGATE__NOTIFY__WEBHOOK_URL",
                "https://hooks.example.com/t",
            ),
            ("TOLLGATE__NOTIFY__WEBHOOK_SECRET", "  "),
        ])
        .unwrap();
        assert!(!config.notify.enabled());
    }
}
