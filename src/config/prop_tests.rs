//! Property tests of [`Config::load`]: whatever the files and the `TOLLGATE__*`
//! environment hold, loading never panics, and a refusal is one line an operator can read.
//!
//! The inputs are "TOML-ish": mostly the real sections and keys with values of every
//! type, mixed with broken syntax, odd Unicode and bytes that are not UTF-8, so that both
//! the parser and the typed extraction and validation behind it are reached.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

use super::{Config, Sources};

/// Sections and keys of `config/default.toml`, plus a few that do not exist.
const KEYS: &[(&str, &[&str])] = &[
    (
        "server",
        &[
            "listen",
            "metrics_listen",
            "tls_cert",
            "tls_key",
            "shutdown_grace_ms",
        ],
    ),
    (
        "database",
        &[
            "url",
            "max_connections",
            "migrate_on_start",
            "acquire_timeout_ms",
        ],
    ),
    (
        "upstream",
        &["base_url", "shared_secret", "key_header", "timeout_ms"],
    ),
    ("admin", &["token"]),
    ("account", &["session_ttl_seconds"]),
    ("key_cache", &["enabled", "max_entries"]),
    (
        "throttle",
        &[
            "enabled",
            "admission_percent",
            "store",
            "refresh_interval_ms",
            "max_staleness_ms",
            "reconcile_interval_ms",
            "kv_call_budget",
            "kv_budget_window_ms",
            "kv_timeout_ms",
        ],
    ),
    (
        "usage_check",
        &[
            "enabled",
            "queue_capacity",
            "batch_size",
            "batch_linger_ms",
            "concurrent_batches",
            "account_lanes",
            "drain_timeout_ms",
            "lock_timeout_ms",
        ],
    ),
    ("usage", &["free_monthly_calls"]),
    (
        "cloudflare",
        &["api_base", "account_id", "namespace_id", "api_token"],
    ),
    ("log", &["format", "filter"]),
    (
        "notify",
        &[
            "webhook_url",
            "webhook_secret",
            "thresholds",
            "timeout_ms",
            "lease_ttl_ms",
        ],
    ),
    ("nosuchsection", &["nosuchkey"]),
];

fn section_and_key() -> impl Strategy<Value = (String, String)> {
    (0..KEYS.len(), any::<prop::sample::Index>()).prop_map(|(s, k)| {
        let (section, keys) = KEYS[s];
        (section.to_owned(), k.get(keys).to_string())
    })
}

/// Values as an operator might type them: right, wrong, huge, negative, empty, odd.
fn raw_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("true".to_owned()),
        Just("FALSE".to_owned()),
        Just("memory".to_owned()),
        Just("127.0.0.1:0".to_owned()),
        Just("[::1]:99999".to_owned()),
        Just("http://127.0.0.1:9".to_owned()),
        Just("x-api-key".to_owned()),
        Just(String::new()),
        Just("two\nlines".to_owned()),
        Just("carriage\rreturn".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        "[ -~]{0,24}",
        any::<String>(),
    ]
}

/// A TOML value for `raw`: quoted, bare, in an array or an inline table.
fn toml_value() -> impl Strategy<Value = String> {
    (raw_value(), 0..5u8).prop_map(|(raw, form)| match form {
        0 => format!("{raw:?}"),
        1 => raw,
        2 => format!("[{raw:?}, 1]"),
        3 => format!("{{ inner = {raw:?} }}"),
        _ => format!("'''{raw}'''"),
    })
}

fn toml_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (section_and_key(), toml_value())
            .prop_map(|((_, key), value)| format!("{key} = {value}")),
        2 => section_and_key().prop_map(|(section, _)| format!("[{section}]")),
        1 => (section_and_key(), toml_value())
            .prop_map(|((section, key), value)| format!("{section}.{key} = {value}")),
        1 => Just("[[plans]]".to_owned()),
        1 => "[ -~]{0,40}",
        1 => any::<String>(),
    ]
}

/// A whole file: TOML-ish lines, or arbitrary bytes now and then.
fn file_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => prop::collection::vec(toml_line(), 0..12).prop_map(|lines| lines.join("\n").into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// One environment variable, mostly `TOLLGATE__<SECTION>__<KEY>` in any case, sometimes
/// with the wrong number of parts or not ours at all.
fn env_var() -> impl Strategy<Value = (String, String)> {
    let name = prop_oneof![
        6 => (section_and_key(), any::<bool>()).prop_map(|((section, key), upper)| {
            let name = format!("TOLLGATE__{section}__{key}");
            if upper { name.to_uppercase() } else { name }
        }),
        1 => section_and_key().prop_map(|(section, _)| format!("TOLLGATE__{section}")),
        1 => section_and_key().prop_map(|(section, key)| format!("tollgate__{section}__{key}__extra")),
        1 => "TOLLGATE__[A-Za-z_.]{0,12}",
        1 => any::<String>(),
    ];
    (name, raw_value())
}

fn write(path: &Path, body: &[u8]) {
    std::fs::write(path, body).expect("writing into a fresh temporary folder");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn config_load_never_panics_and_refuses_in_one_line(
        default_toml in prop::option::of(file_body()),
        profile_toml in prop::option::of(file_body()),
        extra_toml in prop::option::of(file_body()),
        env in prop::collection::vec(env_var(), 0..8),
    ) {
        let dir = tempfile::tempdir().expect("a temporary folder");
        if let Some(body) = &default_toml {
            write(&dir.path().join("default.toml"), body);
        }
        // A profile whose file is missing is one of the errors to report.
        let profile = profile_toml.as_ref().map(|body| {
            write(&dir.path().join("staging.toml"), body);
            "staging".to_owned()
        });
        let file = extra_toml.as_ref().map(|body| {
            let path = dir.path().join("extra.toml");
            write(&path, body);
            path
        });
        let sources = Sources { dir: dir.path().to_owned(), profile, file, env };

        let loaded = std::panic::catch_unwind(|| Config::load(&sources));
        prop_assert!(loaded.is_ok(), "Config::load panicked on {sources:?}");
        if let Ok(Err(error)) = loaded {
            let line = error.to_string();
            prop_assert!(line.starts_with("configuration error: "), "{line}");
            prop_assert!(line.len() > "configuration error: ".len(), "{line}");
            prop_assert!(!line.contains('\n') && !line.contains('\r'), "{line:?}");
        }
    }

    #[test]
    fn a_missing_profile_or_config_file_is_one_line_not_a_panic(
        profile in "[a-z]{1,8}",
        env in prop::collection::vec(env_var(), 0..4),
    ) {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let sources = Sources {
            dir: dir.path().to_owned(),
            profile: Some(profile),
            file: Some(dir.path().join("absent.toml")),
            env,
        };
        let line = std::panic::catch_unwind(|| Config::load(&sources))
            .map_err(|_| TestCaseError::fail("Config::load panicked"))?
            .expect_err("the profile's file is missing")
            .to_string();
        prop_assert!(line.starts_with("configuration error: ") && !line.contains('\n'), "{line:?}");
    }
}
