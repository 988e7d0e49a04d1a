//! Configuration layering, the command line, and migrations.

mod common;

use std::path::Path;
use std::process::Command;

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

fn tollgate(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(args).env("TOLLGATE_CONFIG_DIR", dir.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

#[test]
fn serve_with_a_bad_configuration_exits_with_one_line() {
    let out = tollgate(&["serve"], &[("TOLLGATE__SERVER__NOPE", "1")]);
    assert!(!out.status.success());
    let err = stderr_line(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn serve_without_the_shared_secret_refuses_to_start() {
    let out = tollgate(&["serve"], &[]);
    assert!(!out.status.success());
    let err = stderr_line(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("shared_secret"), "{err}");
}

#[test]
fn migrate_against_an_unreachable_database_exits_with_one_line() {
    let out = tollgate(
        &["migrate"],
        &[(
            "TOLLGATE__DATABASE__URL",
            "postgres://postgres@127.0.0.1:1/tollgate",
        )],
    );
    assert!(!out.status.success());
    let err = stderr_line(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("database"), "{err}");
}

#[tokio::test]
async fn migrate_creates_the_database_and_a_second_run_changes_nothing() {
    let name = format!("tollgate_test_{}", uuid::Uuid::new_v4().simple());
    let admin = common::admin_url();
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    let first = tollgate(&["migrate"], &[("TOLLGATE__DATABASE__URL", &url)]);
    let first_out = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(first.status.success(), "{}", stderr_line(&first));
    assert!(first_out.contains("created the database"), "{first_out}");
    for name in tollgate::db::shipped_migrations() {
        assert!(
            first_out.contains(&format!("applied {name}")),
            "{first_out}"
        );
    }

    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let schema = |pool: sqlx::PgPool| async move {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT table_name::text, column_name::text, data_type::text
             FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let history: i64 = sqlx::query_scalar("SELECT count(*) FROM refinery_schema_history")
            .fetch_one(&pool)
            .await
            .unwrap();
        (rows, history)
    };
    let before = schema(pool.clone()).await;

    let second = tollgate(&["migrate"], &[("TOLLGATE__DATABASE__URL", &url)]);
    assert!(second.status.success());
    let second_out = String::from_utf8_lossy(&second.stdout);
    assert!(second_out.contains("no migration applied"), "{second_out}");
    assert_eq!(schema(pool.clone()).await, before);
    assert_eq!(before.1, tollgate::db::shipped_migrations().len() as i64);
    pool.close().await;

    let admin_pool = sqlx::PgPool::connect(&admin).await.unwrap();
    sqlx::query(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .execute(&admin_pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_schema_keeps_the_contract_table_names() {
    let db = common::TestDb::new().await;
    for table in [
        "account",
        "api_key",
        "subscription",
        "subscription_tracking",
        "monthly_usage",
    ] {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_name = $1)",
        )
        .bind(table)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert!(exists, "{table}");
    }
}

#[tokio::test]
async fn v3_gives_existing_subscriptions_3000_calls_and_existing_accounts_a_free_plan() {
    let db = common::TestDb::migrated_to(Some(2)).await;
    let legacy: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash) VALUES ('old@example.com', 'x') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let bare: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash) VALUES ('bare@example.com', 'x') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO subscription (account_id, plan, starts_at) VALUES ($1, 'gold', now())",
    )
    .bind(legacy)
    .execute(&db.pool)
    .await
    .unwrap();

    tollgate::db::migrate(&secrecy::SecretString::from(db.url.clone()))
        .await
        .unwrap();

    let gold: i64 =
        sqlx::query_scalar("SELECT monthly_allowance FROM subscription WHERE plan = 'gold'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(gold, 3000);
    for account in [legacy, bare] {
        let free: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM subscription WHERE account_id = $1 AND plan = 'free'",
        )
        .bind(account)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(free, 1);
    }
}

#[tokio::test]
async fn the_database_refuses_a_second_free_grant_for_the_same_month() {
    let db = common::TestDb::new().await;
    let account: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash) VALUES ('a@example.com', 'x') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let sub: i64 = sqlx::query_scalar(
        "INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
         VALUES ($1, 'free', now(), 3000) RETURNING id",
    )
    .bind(account)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let insert = || {
        sqlx::query(
            "INSERT INTO monthly_usage (account_id, subscription_id, month_start, allowance, is_free)
             VALUES ($1, $2, '2026-11-01T00:00:00Z', 3000, true)",
        )
        .bind(account)
        .bind(sub)
        .execute(&db.pool)
    };
    insert().await.unwrap();
    let err = insert().await.unwrap_err();
    assert!(matches!(err, sqlx::Error::Database(e) if e.is_unique_violation()));
}
