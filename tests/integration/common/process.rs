//! The real `tollgate` binary as a child process, for tests that kill or restart it.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `tollgate <command>` with only `env` (and the repository's config folder),
/// its stdout and stderr written to `log`.
///
/// # Panics
/// When the log cannot be created or the binary does not start.
pub fn spawn_tollgate(command: &str, env: &[(String, String)], log: &Path) -> Child {
    let file = std::fs::File::create(log).unwrap();
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg(command)
        .env_clear()
        .env(
            "TOLLGATE_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .env("RUST_LOG", "info,sqlx=warn")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("the tollgate binary starts")
}

/// Waits (up to 30 s) until the process serving `base` answers `/readyz` with 200.
///
/// # Panics
/// When it does not, with the process's `log`.
pub async fn wait_until_ready(base: &str, log: &Path) {
    let ready = format!("{base}/readyz");
    let up = super::eventually(std::time::Duration::from_secs(30), || async {
        super::client()
            .get(&ready)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(
        up,
        "the process did not start:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}
