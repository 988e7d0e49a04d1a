//! Reloading the configuration while serving (SPEC §20): `POST /admin/v1/reload` on a
//! gateway read from files as `tollgate serve` reads them (`api.rs`), and `SIGHUP` to
//! the real binary (`hangup.rs`).

mod api;
mod budgets;
mod hangup;

use std::path::PathBuf;
use std::sync::Arc;

use reqwest::Response;
use serde_json::Value;
use tempfile::TempDir;
use tollgate::config::{Config, Sources};
use tollgate_testkit::upstream::UpstreamServer;

use crate::common::*;

/// A gateway whose configuration comes from files: the config folder's `default.toml`
/// with what every test app needs, and a `--config FILE` layer the test rewrites.
pub struct FromFiles {
    pub app: TestApp,
    /// The `--config FILE` layer.
    pub file: PathBuf,
    _dir: TempDir,
}

/// The settings of the test configuration ([`test_config`]), as `default.toml` says them.
fn base_file(db: &TestDb, upstream: &UpstreamServer) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
shutdown_grace_ms = 5000

[database]
url = "{db}"
max_connections = 10

[upstream]
base_url = "{upstream}"
shared_secret = "{SHARED_SECRET}"
timeout_ms = 5000

[admin]
token = "{ADMIN_TOKEN}"

[throttle]
store = "memory"
refresh_interval_ms = 200
"#,
        db = db.url,
        upstream = upstream.base_url(),
    )
}

/// Starts a gateway on a configuration loaded from files, `layer` being the
/// `--config FILE` layer.
pub async fn spawn_from_files(layer: &str) -> FromFiles {
    let db = Arc::new(TestDb::new().await);
    let upstream = Arc::new(UpstreamServer::start().await.expect("upstream starts"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("default.toml"), base_file(&db, &upstream)).unwrap();
    let file = dir.path().join("extra.toml");
    std::fs::write(&file, layer).unwrap();
    let config = Config::load(&Sources {
        dir: dir.path().to_owned(),
        profile: None,
        file: Some(file.clone()),
        env: Vec::new(),
    })
    .expect("the test configuration loads");
    FromFiles {
        app: spawn_replica(db, upstream, config).await,
        file,
        _dir: dir,
    }
}

impl FromFiles {
    /// Replaces the `--config FILE` layer.
    pub fn rewrite(&self, layer: &str) {
        std::fs::write(&self.file, layer).unwrap();
    }

    /// `POST /admin/v1/reload` with `token`.
    pub async fn reload_with(&self, token: &str) -> Response {
        self.app
            .client
            .post(self.app.url("/admin/v1/reload"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// Reloads, expecting success; the generation now in force.
    pub async fn reload(&self) -> i64 {
        let res = self.reload_with(ADMIN_TOKEN).await;
        let status = res.status();
        let body: Value = res.json().await.unwrap();
        assert_eq!(status, 200, "{body}");
        body["generation"].as_i64().expect("a generation")
    }

    /// The names of `GET /account/v1/plans`.
    pub async fn plan_names(&self) -> Vec<String> {
        plan_names(&self.app.base).await
    }
}

/// The names of `GET /account/v1/plans` of the gateway at `base`.
pub async fn plan_names(base: &str) -> Vec<String> {
    let plans: Value = client()
        .get(format!("{base}/account/v1/plans"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    plans
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect()
}
