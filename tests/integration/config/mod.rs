//! Configuration layering, the command line, and migrations.

mod cli;
mod layering;
mod migrations;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

/// Runs the built binary with an empty config folder (unless `env` names another) and
/// only the given `TOLLGATE*` variables.
fn tollgate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    tollgate_in(
        dir.path(),
        args,
        &[("TOLLGATE_CONFIG_DIR", dir.path().to_str().unwrap())],
        env,
    )
}

fn tollgate_in(cwd: &Path, args: &[&str], base: &[(&str, &str)], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(args).current_dir(cwd).env_remove("RUST_LOG");
    for (name, _) in std::env::vars() {
        if name.to_ascii_uppercase().starts_with("TOLLGATE") {
            cmd.env_remove(name);
        }
    }
    for (k, v) in base.iter().chain(env) {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts one non-empty line on stderr, free of figment and Rust internals; returns it.
fn one_clean_line(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure: {out:?}");
    let err = stderr_of(out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    let line = lines[0].to_owned();
    assert!(line.starts_with("tollgate: "), "{line}");
    for internal in ["src/", "alloc::", ".rs:", "default.server"] {
        assert!(!line.contains(internal), "{internal} in: {line}");
    }
    line
}

fn free_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// What the binary wrote to stderr, trimmed.
fn stderr_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}
