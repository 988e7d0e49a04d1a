//! The command line as an operator meets it: a bad start refused in one line on stderr,
//! naming the source of a configuration error once; the demo script refusing busy ports.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::*;

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

#[test]
fn demo_refuses_a_busy_gateway_address_before_building_anything() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let started = Instant::now();
    let child = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo.sh"))
        .arg("--check")
        .env("TOLLGATE_DEMO_ADDR", &busy_addr)
        .env("TOLLGATE_DEMO_UPSTREAM", free_addr())
        .env("TOLLGATE_DEMO_METRICS", free_addr())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // A demo that went on would build and start servers; stop all of it, not just bash.
    let group = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .arg("--")
                .arg(format!("-{group}"))
                .status();
            panic!("the demo was still running after 60 s");
        }
    };
    let took = started.elapsed();
    let err = stderr_of(&out);
    assert!(
        !out.status.success(),
        "exit 0; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    assert!(lines[0].contains(&busy_addr), "{err}");
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: it went on past the check"
    );
    drop(busy);
}

#[test]
fn an_unknown_key_from_the_environment_names_the_variable() {
    let out = tollgate(&["migrate"], &[("TOLLGATE__SERVER__LISTN", "1")]);
    let line = one_clean_line(&out);
    assert!(line.contains("TOLLGATE__SERVER__LISTN"), "{line}");
    assert!(line.contains("server.listn"), "{line}");
}

#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let out = tollgate(
        &["migrate"],
        &[("TOLLGATE__SERVER__SHUTDOWN_GRACE_MS", "soon")],
    );
    let line = one_clean_line(&out);
    assert!(
        line.contains("TOLLGATE__SERVER__SHUTDOWN_GRACE_MS"),
        "{line}"
    );
    assert!(line.contains("soon"), "{line}");
}

#[test]
fn an_unknown_key_in_a_config_file_names_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("extra.toml");
    std::fs::write(&file, "[server]\nlistn = 1\n").unwrap();
    let out = tollgate(&["--config", file.to_str().unwrap(), "migrate"], &[]);
    let line = one_clean_line(&out);
    assert!(
        line.contains(&format!("{}: unknown key server.listn", file.display())),
        "{line}"
    );

    // The default folder, named as the operator knows it.
    std::fs::create_dir(dir.path().join("config")).unwrap();
    std::fs::write(
        dir.path().join("config/default.toml"),
        "[server]\nlistn = 1\n",
    )
    .unwrap();
    let out = tollgate_in(dir.path(), &["migrate"], &[], &[]);
    let line = one_clean_line(&out);
    assert!(
        line.contains("config/default.toml: unknown key server.listn"),
        "{line}"
    );
}

#[test]
fn a_missing_config_folder_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nonexistent");
    let out = tollgate_in(
        dir.path(),
        &["migrate"],
        &[("TOLLGATE_CONFIG_DIR", missing.to_str().unwrap())],
        &[(
            "TOLLGATE__DATABASE__URL",
            "postgres://postgres@127.0.0.1:1/x",
        )],
    );
    let line = one_clean_line(&out);
    assert!(line.contains(missing.to_str().unwrap()), "{line}");
    assert!(
        !line.contains("database"),
        "went on to the database: {line}"
    );

    // The default ./config may be absent: configuration by environment alone.
    let out = tollgate_in(
        dir.path(),
        &["migrate"],
        &[],
        &[(
            "TOLLGATE__DATABASE__URL",
            "postgres://postgres@127.0.0.1:1/x",
        )],
    );
    let line = one_clean_line(&out);
    assert!(line.contains("cannot reach the database"), "{line}");
}

#[test]
fn an_unreachable_database_is_reported_once_without_repeated_causes() {
    let out = tollgate(
        &["migrate"],
        &[(
            "TOLLGATE__DATABASE__URL",
            "postgres://postgres@127.0.0.1:1/x",
        )],
    );
    let line = one_clean_line(&out);
    assert_eq!(line.matches("Connection refused").count(), 1, "{line}");
}

#[test]
fn serve_reports_a_fatal_error_once_even_with_logs_on() {
    let out = tollgate(
        &["serve"],
        &[
            (
                "TOLLGATE__DATABASE__URL",
                "postgres://postgres@127.0.0.1:1/x",
            ),
            ("TOLLGATE__UPSTREAM__SHARED_SECRET", "s"),
            ("TOLLGATE__SERVER__LISTEN", "127.0.0.1:0"),
            ("TOLLGATE__SERVER__METRICS_LISTEN", "127.0.0.1:0"),
        ],
    );
    let line = one_clean_line(&out);
    assert_eq!(line.matches("Connection refused").count(), 1, "{line}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("Connection refused"),
        "the fatal error is also in the log: {stdout}"
    );
}
