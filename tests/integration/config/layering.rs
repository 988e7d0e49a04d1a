//! How the configuration is layered from built-ins, profile, files and environment,
//! and what it refuses.

use std::path::Path;

use secrecy::ExposeSecret;
use tollgate::config::{Config, Sources};

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn sources(dir: &Path) -> Sources {
    Sources {
        dir: dir.to_owned(),
        ..Default::default()
    }
}

#[test]
fn built_in_defaults_apply_without_any_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load(&sources(dir.path())).unwrap();
    assert_eq!(config.server.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(config.server.metrics_listen.to_string(), "127.0.0.1:9090");
    assert_eq!(config.database.max_connections, 16);
    assert_eq!(config.upstream.key_header, "x-api-key");
    assert_eq!(config.upstream.timeout_ms, 30_000);
    assert_eq!(config.throttle.admission_percent, 20);
    assert!(config.throttle.enabled && config.usage_check.enabled);
    assert_eq!(config.usage_check.queue_capacity, 10_000);
    assert_eq!(config.usage.free_monthly_calls, 3_000);
    assert_eq!(
        config.cloudflare.api_base,
        "https://api.cloudflare.com/client/v4"
    );
    assert!(config.admin.token.is_none());
}

#[test]
fn later_layers_win_default_then_profile_then_file_then_environment() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "default.toml",
        "[usage]\nfree_monthly_calls = 10\n[upstream]\ntimeout_ms = 1\n[throttle]\nadmission_percent = 1\n[database]\nmax_connections = 1\n",
    );
    write(
        dir.path(),
        "staging.toml",
        "[usage]\nfree_monthly_calls = 20\n[upstream]\ntimeout_ms = 2\n[throttle]\nadmission_percent = 2\n",
    );
    let extra = dir.path().join("extra.toml");
    std::fs::write(
        &extra,
        "[usage]\nfree_monthly_calls = 30\n[upstream]\ntimeout_ms = 3\n",
    )
    .unwrap();
    let config = Config::load(&Sources {
        dir: dir.path().to_owned(),
        profile: Some("staging".into()),
        file: Some(extra),
        env: vec![("TOLLGATE__USAGE__FREE_MONTHLY_CALLS".into(), "40".into())],
    })
    .unwrap();
    assert_eq!(config.usage.free_monthly_calls, 40, "environment wins");
    assert_eq!(config.upstream.timeout_ms, 3, "--config beats the profile");
    assert_eq!(
        config.throttle.admission_percent, 2,
        "profile beats default.toml"
    );
    assert_eq!(
        config.database.max_connections, 1,
        "default.toml beats built-ins"
    );
}

#[test]
fn environment_keys_are_case_insensitive_and_typed() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load(&Sources {
        dir: dir.path().to_owned(),
        env: vec![
            ("tollgate__throttle__enabled".into(), "false".into()),
            ("TOLLGATE__Server__Listen".into(), "127.0.0.1:7000".into()),
            ("TOLLGATE__UPSTREAM__SHARED_SECRET".into(), "12345".into()),
            ("TOLLGATE__ADMIN__TOKEN".into(), "true".into()),
            ("OTHER__SERVER__LISTEN".into(), "ignored".into()),
        ],
        ..Default::default()
    })
    .unwrap();
    assert!(!config.throttle.enabled);
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:7000");
    assert_eq!(
        config.upstream.shared_secret.unwrap().expose_secret(),
        "12345"
    );
    assert_eq!(config.admin.token.unwrap().expose_secret(), "true");
}

#[test]
fn unknown_keys_are_refused_in_files_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "default.toml",
        "[server]\nlisten = \"127.0.0.1:1\"\nlisten_typo = 1\n",
    );
    let err = Config::load(&sources(dir.path())).unwrap_err().to_string();
    assert!(err.contains("listen_typo"), "{err}");
    assert!(!err.contains('\n'));

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "default.toml", "[nonsense]\nx = 1\n");
    assert!(Config::load(&sources(dir.path())).is_err());

    let dir = tempfile::tempdir().unwrap();
    let err = Config::load(&Sources {
        dir: dir.path().to_owned(),
        env: vec![("TOLLGATE__THROTTLE__ADMISION_PERCENT".into(), "5".into())],
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("admision_percent"), "{err}");
}

#[test]
fn a_named_profile_without_its_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = Config::load(&Sources {
        dir: dir.path().to_owned(),
        profile: Some("prod".into()),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("prod"), "{err}");
}

#[test]
fn out_of_range_values_are_reported_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "default.toml",
        "[throttle]\nadmission_percent = 101\n",
    );
    let err = Config::load(&sources(dir.path())).unwrap_err().to_string();
    assert!(err.contains("admission_percent"), "{err}");

    write(
        dir.path(),
        "default.toml",
        "[throttle]\nstore = \"redis\"\n",
    );
    let err = Config::load(&sources(dir.path())).unwrap_err().to_string();
    assert!(err.contains("redis") && !err.contains('\n'), "{err}");

    write(
        dir.path(),
        "default.toml",
        "[server]\ntls_cert = \"/x.pem\"\n",
    );
    assert!(
        Config::load(&sources(dir.path())).is_err(),
        "cert without key"
    );
}

#[test]
fn the_shipped_local_profile_turns_metering_and_throttling_off() {
    let config = Config::load(&Sources {
        dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("config"),
        profile: Some("local".into()),
        ..Default::default()
    })
    .unwrap();
    assert!(!config.throttle.enabled);
    assert!(!config.usage_check.enabled);
    assert!(config.is_local_profile());
    assert!(
        config.validate_for_serve().is_ok(),
        "no shared secret needed locally"
    );

    let shipped = Config::load(&Sources {
        dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("config"),
        ..Default::default()
    })
    .unwrap();
    assert!(shipped.throttle.enabled && shipped.usage_check.enabled);
    assert!(
        shipped.validate_for_serve().is_err(),
        "serve needs the shared secret"
    );
}

#[test]
fn secrets_never_appear_in_debug_output() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load(&Sources {
        dir: dir.path().to_owned(),
        env: vec![
            (
                "TOLLGATE__UPSTREAM__SHARED_SECRET".into(),
                "s3cr3t-upstream".into(),
            ),
            ("TOLLGATE__ADMIN__TOKEN".into(), "s3cr3t-admin".into()),
            ("TOLLGATE__CLOUDFLARE__API_TOKEN".into(), "s3cr3t-cf".into()),
            (
                "TOLLGATE__DATABASE__URL".into(),
                "postgres://u:s3cr3t-db@h/d".into(),
            ),
        ],
        ..Default::default()
    })
    .unwrap();
    let shown = format!("{config:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
}
