//! Configuration layering, the command line, and migrations.

mod cli;
mod layering;
mod migrations;

use std::process::Command;

/// Runs the gateway's binary with an empty configuration directory.
fn tollgate(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(args).env("TOLLGATE_CONFIG_DIR", dir.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// What the binary wrote to stderr, trimmed.
fn stderr_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}
