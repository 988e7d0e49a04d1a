//! The gateway on port 0 over a fresh database and the local upstream, with just what
//! the memory tests need. It shares the integration tests' fresh database.

use std::net::SocketAddr;

use secrecy::SecretString;
use serde_json::{Value, json};
use tollgate::Gateway;
use tollgate::config::{Config, MarkerStoreKind};
use tollgate_testkit::upstream::UpstreamServer;

use crate::db::TestDb;

/// A running gateway; it runs until the test's runtime ends.
pub struct TestApp {
    pub addr: SocketAddr,
    pub client: reqwest::Client,
    _db: TestDb,
    _upstream: UpstreamServer,
}

pub struct Customer {
    pub api_key: String,
    pub email: String,
}

pub const PASSWORD: &str = "correct horse battery";

/// Starts a gateway whose configuration `adjust` may change.
pub async fn spawn_app_with(adjust: impl FnOnce(&mut Config)) -> TestApp {
    let db = TestDb::new().await;
    let upstream = UpstreamServer::start().await.expect("upstream starts");
    let mut config = Config::default();
    config.database.url = SecretString::from(db.url.clone());
    config.upstream.base_url = upstream.base_url();
    config.upstream.shared_secret = Some(SecretString::from("upstream-shared-secret"));
    config.upstream.timeout_ms = 5_000;
    config.throttle.store = MarkerStoreKind::Memory;
    adjust(&mut config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gateway = Gateway::build(config, db.pool.clone())
        .await
        .expect("gateway builds");
    tokio::spawn(gateway.run(listener, None, std::future::pending()));
    TestApp {
        addr,
        client: reqwest::Client::builder().no_proxy().build().unwrap(),
        _db: db,
        _upstream: upstream,
    }
}

impl TestApp {
    /// The gateway's database.
    pub fn pool(&self) -> &sqlx::PgPool {
        &self._db.pool
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn signup(&self) -> Customer {
        let email = format!("{}@example.com", uuid::Uuid::new_v4().simple());
        let res = self
            .post_json(
                "/account/v1/signup",
                &json!({"email": email, "password": PASSWORD}),
            )
            .await;
        assert_eq!(res.status(), 201, "signup");
        let body: Value = res.json().await.unwrap();
        Customer {
            api_key: body["api_key"].as_str().unwrap().to_owned(),
            email,
        }
    }
}

/// A field of `/proc/self/status` in bytes (`VmHWM`, `VmRSS`).
pub fn status_bytes(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Serializes the tests of this binary and resets the process's peak memory, so each
/// test's peak is its own.
pub async fn measuring_alone() -> tokio::sync::MutexGuard<'static, ()> {
    static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = ALONE.lock().await;
    // Writing 5 to clear_refs resets VmHWM (Linux 4.0 and later).
    std::fs::write("/proc/self/clear_refs", "5").expect("peak memory can be reset");
    guard
}
