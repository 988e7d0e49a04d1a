//! `SIGHUP` to `tollgate serve`: the same reload as the admin route, its outcome in the
//! log, and the process running whatever came of it.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::jetstream::free_port;

/// A `tollgate serve` child reading its configuration from a folder of its own, killed
/// when dropped.
struct Serve {
    child: Child,
    base: String,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn hang_up(&self) {
        let sent = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (up to 10 s) until the log has a line holding every one of `words`.
    async fn logged(&self, words: &[&str]) {
        let found = eventually(Duration::from_secs(10), || async {
            self.log()
                .lines()
                .any(|line| words.iter().all(|w| line.contains(w)))
        })
        .await;
        assert!(found, "no line with {words:?} in:\n{}", self.log());
    }

    async fn reload(&self) -> (u16, Value) {
        let res = client()
            .post(format!("{}/admin/v1/reload", self.base))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.json().await.unwrap())
    }
}

/// The config folder's `default.toml`: a log filter, a server setting read only at
/// start, and a catalogue.
fn default_toml(filter: &str, idle_timeout_ms: u64, plans: &[&str]) -> String {
    let mut text =
        format!("[log]\nfilter = \"{filter}\"\n\n[server]\nidle_timeout_ms = {idle_timeout_ms}\n");
    for plan in plans {
        text.push_str(&format!(
            "\n[[plans]]\nname = \"{plan}\"\nmonthly_allowance = 100\n"
        ));
    }
    text
}

fn write(dir: &Path, text: &str) {
    std::fs::write(dir.join("default.toml"), text).unwrap();
}

#[tokio::test]
async fn sighup_reloads_a_running_gateway_and_a_bad_file_leaves_it_serving() {
    let db = TestDb::new().await;
    let upstream = UpstreamServer::start().await.expect("upstream starts");
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &default_toml("warn", 60_000, &["basic"]));
    let (port, metrics_port) = (free_port(), free_port());
    let env: Vec<(String, String)> = [
        (
            "TOLLGATE_CONFIG_DIR",
            dir.path().to_str().unwrap().to_owned(),
        ),
        ("TOLLGATE__DATABASE__URL", db.url.clone()),
        ("TOLLGATE__UPSTREAM__BASE_URL", upstream.base_url()),
        ("TOLLGATE__UPSTREAM__SHARED_SECRET", SHARED_SECRET.into()),
        ("TOLLGATE__ADMIN__TOKEN", ADMIN_TOKEN.into()),
        ("TOLLGATE__THROTTLE__STORE", "memory".into()),
        ("TOLLGATE__SERVER__LISTEN", format!("127.0.0.1:{port}")),
        (
            "TOLLGATE__SERVER__METRICS_LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        ),
        // Empty: log.filter decides, as a reload may change it.
        ("RUST_LOG", String::new()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let log = dir.path().join("serve.log");
    let serve = Serve {
        child: spawn_tollgate("serve", &env, &log),
        base: format!("http://127.0.0.1:{port}"),
        log,
    };
    wait_until_ready(&serve.base, &serve.log).await;
    assert_eq!(plan_names(&serve.base).await, ["basic"]);
    assert!(
        !serve.log().contains("tollgate serving"),
        "log.filter = \"warn\" holds info lines back:\n{}",
        serve.log()
    );

    // A new plan, a louder filter, and a setting only a restart applies.
    write(dir.path(), &default_toml("info", 1_234, &["basic", "gold"]));
    serve.hang_up();
    let offered = eventually(Duration::from_secs(10), || async {
        plan_names(&serve.base).await == ["basic", "gold"]
    })
    .await;
    assert!(offered, "gold never offered:\n{}", serve.log());
    serve
        .logged(&["configuration reloaded", "generation=2", "SIGHUP"])
        .await;
    serve
        .logged(&["take effect only after a restart", "server"])
        .await;

    // A file that does not load: logged, and the gateway serves on as it was.
    write(
        dir.path(),
        &format!(
            "{}price = 3\n",
            default_toml("info", 1_234, &["basic", "gold", "x"])
        ),
    );
    serve.hang_up();
    serve
        .logged(&["configuration reload refused", "unknown key", "price"])
        .await;
    assert_eq!(plan_names(&serve.base).await, ["basic", "gold"]);
    let (status, body) = serve.reload().await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("VALIDATION_FAILED")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("price"),
        "{body}"
    );

    write(dir.path(), &default_toml("info", 1_234, &["gold"]));
    let (status, body) = serve.reload().await;
    assert_eq!(
        (status, body["generation"].as_i64()),
        (200, Some(3)),
        "{body}"
    );
    assert_eq!(plan_names(&serve.base).await, ["gold"]);
    let mut serve = serve;
    assert!(serve.child.try_wait().unwrap().is_none(), "still running");
}
