//! The connection keys: defaults, zero values, trusted proxy blocks.

use super::*;

fn load(dir: &Path, env: &[(&str, &str)]) -> Result<Config, String> {
    Config::load(&Sources {
        dir: dir.to_owned(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

#[test]
fn the_connection_keys_have_the_spec_defaults_in_code_and_in_default_toml() {
    let empty = tempfile::tempdir().unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    for dir in [empty.path(), shipped.as_path()] {
        let config = load(dir, &[]).unwrap();
        assert_eq!(config.server.header_read_timeout_ms, 10_000);
        assert_eq!(config.server.idle_timeout_ms, 60_000);
        assert_eq!(config.server.max_connections, 10_000);
        assert!(config.server.trusted_proxies.is_empty());
    }
    let listed = std::fs::read_to_string(shipped.join("default.toml")).unwrap();
    for key in [
        "header_read_timeout_ms",
        "idle_timeout_ms",
        "max_connections = 10000",
        "trusted_proxies",
    ] {
        assert!(
            listed.contains(key),
            "config/default.toml does not list {key}"
        );
    }
}

#[test]
fn zero_timeouts_and_connection_caps_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (var, key) in [
        ("TOLLGATE__UPSTREAM__TIMEOUT_MS", "upstream.timeout_ms"),
        (
            "TOLLGATE__SERVER__HEADER_READ_TIMEOUT_MS",
            "server.header_read_timeout_ms",
        ),
        (
            "TOLLGATE__SERVER__IDLE_TIMEOUT_MS",
            "server.idle_timeout_ms",
        ),
        (
            "TOLLGATE__SERVER__MAX_CONNECTIONS",
            "server.max_connections",
        ),
    ] {
        let error = load(dir.path(), &[(var, "0")]).expect_err(key);
        assert!(error.contains(key), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
        assert!(load(dir.path(), &[(var, "1")]).is_ok(), "{key} = 1");
    }
}

#[test]
fn trusted_proxies_take_cidr_blocks_and_refuse_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("default.toml"),
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.1\"]\n",
    )
    .unwrap();
    let config = load(dir.path(), &[]).unwrap();
    let listed: Vec<String> = config
        .server
        .trusted_proxies
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(listed, ["10.0.0.0/8", "2001:db8::/32", "192.0.2.1/32"]);

    let from_env = load(
        dir.path(),
        &[("TOLLGATE__SERVER__TRUSTED_PROXIES", "172.16.0.0/12, ::1")],
    )
    .unwrap();
    let listed: Vec<String> = from_env
        .server
        .trusted_proxies
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(listed, ["172.16.0.0/12", "::1/128"]);

    for bad in ["10.0.0.0/33", "not-an-address", "10.0.0.0/8, 300.1.1.1"] {
        let error = load(dir.path(), &[("TOLLGATE__SERVER__TRUSTED_PROXIES", bad)]).expect_err(bad);
        assert!(error.contains("trusted_proxies"), "{bad}: {error}");
        assert_eq!(error.lines().count(), 1, "{error}");
    }
}
