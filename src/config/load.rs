//! Loading the layers: files, profile, `--config`, environment; then validation.

use std::path::Path;
use std::time::Duration;

use figment::error::Kind;
use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map};
use figment::{Figment, Metadata, Profile, Provider, Source};
use secrecy::{ExposeSecret, SecretString};

use super::settings::{Config, LOCAL_PROFILE};
use super::sources::{DEFAULT_DIR, ENV_PREFIX, Sources, strip_prefix_ignore_case};

/// A configuration problem, worded as the one line an operator sees (values quoted in
/// it cannot break the line: see [`one_line`]).
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {}", one_line(.0))]
pub struct ConfigError(pub(super) String);

impl ConfigError {
    /// A problem found outside this module (a reload's log filter, say), worded as the
    /// one line an operator sees.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

impl Config {
    /// Merges every layer and validates the result.
    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        if sources.dir != Path::new(DEFAULT_DIR) && !sources.dir.is_dir() {
            let why = if sources.dir.exists() {
                "is not a folder"
            } else {
                "does not exist"
            };
            return Err(ConfigError(format!(
                "config folder {} (TOLLGATE_CONFIG_DIR) {why}",
                sources.dir.display()
            )));
        }
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
            figment = figment.merge(EnvVar {
                name: name.clone(),
                key: path.join("."),
                value: value.clone(),
            });
        }
        let mut config: Config = figment.extract().map_err(describe)?;
        config.profile = sources.profile.clone();
        config.sources = Some(sources.kept());
        // Surrounding whitespace (a quoted value, a trailing newline from a secret file)
        // could never match a bearer token, which is read trimmed: it is dropped. An
        // empty or all-whitespace token (e.g. `TOLLGATE__ADMIN__TOKEN=`) means no admin
        // API, as if unset.
        config.admin.token = config.admin.token.take().and_then(|t| {
            let trimmed = t.expose_secret().trim();
            (!trimmed.is_empty()).then(|| SecretString::from(trimmed))
        });
        // Likewise an empty signing secret means no payment webhooks.
        if config
            .billing
            .stripe_webhook_secret
            .as_ref()
            .is_some_and(|t| t.expose_secret().trim().is_empty())
        {
            config.billing.stripe_webhook_secret = None;
        }
        // Likewise an empty API key or event name means no meter export.
        if config
            .billing
            .stripe_api_key
            .as_ref()
            .is_some_and(|t| t.expose_secret().trim().is_empty())
        {
            config.billing.stripe_api_key = None;
        }
        if config
            .billing
            .meter_event_name
            .as_ref()
            .is_some_and(|n| n.trim().is_empty())
        {
            config.billing.meter_event_name = None;
        }
        config.notify.normalize();
        // An empty collector URL (`TOLLGATE__TELEMETRY__OTLP_ENDPOINT=`) means no export.
        if let Some(endpoint) = config.telemetry.otlp_endpoint.take() {
            let endpoint = endpoint.trim();
            config.telemetry.otlp_endpoint = (!endpoint.is_empty()).then(|| endpoint.to_owned());
        }
        config.validate()?;
        Ok(config)
    }

    pub fn is_local_profile(&self) -> bool {
        self.profile.as_deref() == Some(LOCAL_PROFILE)
    }

    pub fn upstream_timeout(&self) -> Duration {
        Duration::from_millis(self.upstream.timeout_ms)
    }
}

/// One `TOLLGATE__<SECTION>__<KEY>` variable as a layer of its own, so that an error in
/// its value names the variable.
struct EnvVar {
    name: String,
    key: String,
    value: String,
}

impl Provider for EnvVar {
    fn metadata(&self) -> Metadata {
        Metadata::from(
            "environment variable",
            Source::Custom(format!("environment variable {}", self.name)),
        )
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        // Kept as text: typed fields parse it (see `lenient`), text fields keep it
        // exactly (a secret like "0123" or "true" stays as written).
        Serialized::default(&self.key, &self.value).data()
    }
}

/// Figment's errors as one line per problem: where the value came from (the file as
/// named, or the environment variable), the key, and what is wrong with it.
fn describe(errors: figment::Error) -> ConfigError {
    let lines: Vec<String> = errors
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let what = match &e.kind {
                Kind::UnknownField(field, known) => {
                    let key = if key.is_empty() { field.clone() } else { key };
                    format!("unknown key {key} (known: {})", known.join(", "))
                }
                Kind::UnknownVariant(value, known) => {
                    format!(
                        "{key}: unknown value `{value}` (known: {})",
                        known.join(", ")
                    )
                }
                kind if key.is_empty() => one_line(&kind.to_string()),
                kind => format!("{key}: {}", one_line(&kind.to_string())),
            };
            match e.metadata.as_ref().and_then(|m| m.source.as_ref()) {
                Some(Source::File(path)) => format!("{}: {what}", path.display()),
                Some(Source::Custom(origin)) => format!("{origin}: {what}"),
                _ => what,
            }
        })
        .collect();
    ConfigError(lines.join("; "))
}

/// Joins the lines of `text` with `; `, leaving out the source excerpts of a TOML parse
/// error (`1 | [server`, `  |        ^`), and escapes what could still break the line or
/// the terminal (a `\r` or another control character, U+2028, U+2029), which a quoted
/// value may hold.
fn one_line(text: &str) -> String {
    let excerpt = |l: &str| {
        l.trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start()
            .starts_with('|')
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !excerpt(l))
        .collect::<Vec<_>>()
        .join("; ")
        .chars()
        .map(|c| {
            if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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
    fn a_named_config_folder_must_exist() {
        let missing = Sources {
            dir: "/nonexistent/tollgate-config".into(),
            ..Default::default()
        };
        let err = Config::load(&missing).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/tollgate-config"), "{err}");
        // Only the default, as named (relative), may be absent; tests/cli.rs runs it so.
        let elsewhere = tempfile::tempdir().unwrap();
        let default = Sources {
            dir: elsewhere.path().join(DEFAULT_DIR),
            ..Default::default()
        };
        assert!(Config::load(&default).is_err());
    }

    #[test]
    fn only_the_jetstream_transport_may_publish_without_consuming_or_run_a_worker() {
        let mut config = Config::default();
        assert!(config.validate().is_ok());
        let err = config.validate_for_worker().unwrap_err().to_string();
        assert!(
            err.contains("usage_check.transport = \"jetstream\""),
            "{err}"
        );
        config.usage_check.consume = false;
        assert!(config.validate().is_err());
        config.usage_check.transport = super::super::settings::UsageTransport::Jetstream;
        assert!(config.validate().is_ok());
        assert!(config.validate_for_worker().is_ok());
        config.nats.subject = "tollgate.*".into();
        assert!(config.validate().is_err());
    }

    #[test]
    fn multi_line_errors_become_one_line() {
        assert_eq!(one_line("a\n  b\n\n"), "a; b");
        assert_eq!(
            one_line(
                "TOML parse error at line 1, column 8\n  |\n1 | [server\n  |        ^\ninvalid table header\n"
            ),
            "TOML parse error at line 1, column 8; invalid table header"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            one_line("`x\ry`\u{2028}z\u{1b}"),
            "`x\\ry`\\u{2028}z\\u{1b}"
        );
    }

    #[test]
    fn a_value_with_a_line_break_cannot_break_the_error_line() {
        let sources = Sources {
            env: vec![(
                "TOLLGATE__UPSTREAM__KEY_HEADER".into(),
                "x-api-key\nx-forged: yes".into(),
            )],
            dir: DEFAULT_DIR.into(),
            ..Default::default()
        };
        let line = Config::load(&sources).unwrap_err().to_string();
        assert!(
            line.starts_with("configuration error: upstream.key_header"),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
    }

    fn load_env(env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::load(&Sources {
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            dir: DEFAULT_DIR.into(),
            ..Default::default()
        })
    }

    #[test]
    fn the_meter_export_keys_have_their_defaults_and_take_the_environment() {
        let config = load_env(&[]).unwrap();
        assert_eq!(config.billing.meter_interval_s, 3600);
        assert_eq!(config.billing.stripe_api_base, "https://api.stripe.com");
        assert!(!config.billing.meter_export_on());

        let config = load_env(&[
            ("TOLLGATE__BILLING__STRIPE_API_KEY", "sk_test_secret_value"),
            ("TOLLGATE__BILLING__METER_EVENT_NAME", "api_units"),
            ("TOLLGATE__BILLING__METER_INTERVAL_S", "60"),
            ("TOLLGATE__BILLING__STRIPE_API_BASE", "http://127.0.0.1:1"),
        ])
        .unwrap();
        assert!(config.billing.meter_export_on());
        assert_eq!(config.billing.meter_interval_s, 60);
        assert!(!format!("{config:?}").contains("sk_test_secret_value"));

        let blank = load_env(&[("TOLLGATE__BILLING__STRIPE_API_KEY", " ")]).unwrap();
        assert!(blank.billing.stripe_api_key.is_none());
    }

    #[test]
    fn trace_export_is_off_by_default_and_takes_a_collector_url() {
        let config = load_env(&[]).unwrap();
        assert_eq!(config.telemetry.otlp_endpoint, None);
        assert_eq!(config.telemetry.sample_ratio, 0.1);
        assert_eq!(config.telemetry.traces_url(), None);

        let config = load_env(&[
            (
                "TOLLGATE__TELEMETRY__OTLP_ENDPOINT",
                "http://collector:4318/",
            ),
            ("TOLLGATE__TELEMETRY__SAMPLE_RATIO", "0.01"),
        ])
        .unwrap();
        assert_eq!(
            config.telemetry.traces_url().as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(config.telemetry.sample_ratio, 0.01);

        let blank = load_env(&[("TOLLGATE__TELEMETRY__OTLP_ENDPOINT", " ")]).unwrap();
        assert_eq!(blank.telemetry.otlp_endpoint, None);

        // A whole number in a file is a ratio too.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("default.toml"),
            "[telemetry]\nsample_ratio = 1\notlp_endpoint = \"https://otel.example:4318/base\"\n",
        )
        .unwrap();
        let config = Config::load(&Sources {
            dir: dir.path().to_owned(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(config.telemetry.sample_ratio, 1.0);
        assert_eq!(
            config.telemetry.traces_url().as_deref(),
            Some("https://otel.example:4318/base/v1/traces")
        );
    }

    #[test]
    fn bad_telemetry_keys_are_refused_naming_the_key() {
        for (key, value) in [
            ("TOLLGATE__TELEMETRY__SAMPLE_RATIO", "1.5"),
            ("TOLLGATE__TELEMETRY__SAMPLE_RATIO", "-0.1"),
            ("TOLLGATE__TELEMETRY__SAMPLE_RATIO", "NaN"),
            ("TOLLGATE__TELEMETRY__SAMPLE_RATIO", "often"),
            ("TOLLGATE__TELEMETRY__OTLP_ENDPOINT", "collector:4318"),
            ("TOLLGATE__TELEMETRY__OTLP_ENDPOINT", "ftp://collector"),
            (
                "TOLLGATE__TELEMETRY__OTLP_ENDPOINT",
                "http://user:secret@collector:4318",
            ),
            (
                "TOLLGATE__TELEMETRY__OTLP_ENDPOINT",
                "http://collector:4318?x=1",
            ),
            ("TOLLGATE__TELEMETRY__SAMPLERATIO", "0.5"),
        ] {
            let line = load_env(&[(key, value)]).unwrap_err().to_string();
            assert!(line.contains("telemetry"), "{key}={value}: {line}");
            assert!(!line.contains("secret@"), "{line}");
        }
    }

    #[test]
    fn bad_meter_export_keys_are_refused() {
        for (key, value) in [
            ("TOLLGATE__BILLING__METER_INTERVAL_S", "0"),
            ("TOLLGATE__BILLING__METER_INTERVAL_S", "-1"),
            ("TOLLGATE__BILLING__STRIPE_API_BASE", "not a url"),
            ("TOLLGATE__BILLING__STRIPE_API_BASE", "ftp://stripe.example"),
            ("TOLLGATE__BILLING__METER_RETRY_MAX_MS", "1"),
            ("TOLLGATE__BILLING__METER_EVENTNAME", "api_units"),
        ] {
            let line = load_env(&[(key, value)]).unwrap_err().to_string();
            assert!(line.contains("billing"), "{key}={value}: {line}");
        }
    }
}
