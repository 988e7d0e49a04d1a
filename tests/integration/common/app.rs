//! The real gateway started on port 0 against its own database and a recording local
//! upstream, in the configuration every test starts from.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::config::{Config, MarkerStoreKind};
use tollgate::usage::accounting::Accountant;
use tollgate::{AppState, Gateway};
use tollgate_testkit::fake_kv::FakeKv;
use tollgate_testkit::upstream::UpstreamServer;

use super::TestDb;

pub const ADMIN_TOKEN: &str = "admin-test-token";
pub const SHARED_SECRET: &str = "upstream-shared-secret";

/// The configuration every test app starts from; tests adjust it.
pub fn test_config(db: &TestDb, upstream: &UpstreamServer) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.shutdown_grace_ms = 5_000;
    config.database.url = SecretString::from(db.url.clone());
    config.database.max_connections = 10;
    config.upstream.base_url = upstream.base_url();
    config.upstream.shared_secret = Some(SecretString::from(SHARED_SECRET));
    config.upstream.timeout_ms = 5_000;
    config.admin.token = Some(SecretString::from(ADMIN_TOKEN));
    config.throttle.store = MarkerStoreKind::Memory;
    config.throttle.refresh_interval_ms = 200;
    // Latencies reach the analytics within this (calls and units: with their batch).
    config.analytics.latency_flush_ms = 50;
    config
}

/// A running gateway with its own database and upstream.
pub struct TestApp {
    pub addr: SocketAddr,
    pub base: String,
    pub db: Arc<TestDb>,
    pub upstream: Arc<UpstreamServer>,
    pub state: AppState,
    pub accountant: Option<Accountant>,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

/// Starts a gateway with the default test configuration.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// Starts a gateway whose configuration `adjust` may change.
pub async fn spawn_app_with(adjust: impl FnOnce(&mut Config)) -> TestApp {
    let db = Arc::new(TestDb::new().await);
    let upstream = Arc::new(UpstreamServer::start().await.expect("upstream starts"));
    let mut config = test_config(&db, &upstream);
    adjust(&mut config);
    spawn_replica(db, upstream, config).await
}

/// Starts a gateway over an existing database and upstream (another replica).
pub async fn spawn_replica(
    db: Arc<TestDb>,
    upstream: Arc<UpstreamServer>,
    config: Config,
) -> TestApp {
    let pool = tollgate::db::connect(
        &config.database.url,
        config.database.max_connections,
        Duration::from_secs(5),
    )
    .await
    .expect("database answers");
    spawn_with_pool(db, upstream, config, pool).await
}

/// Starts a gateway on a given pool (e.g. one that points nowhere).
pub async fn spawn_with_pool(
    db: Arc<TestDb>,
    upstream: Arc<UpstreamServer>,
    config: Config,
    pool: PgPool,
) -> TestApp {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tls = config.server.tls_cert.is_some();
    let gateway = Gateway::build(config, pool).await.expect("gateway builds");
    let state = gateway.state();
    let accountant = gateway.accountant();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(gateway.run(listener, None, async move {
        let _ = rx.await;
    }));
    let scheme = if tls { "https" } else { "http" };
    TestApp {
        addr,
        base: format!("{scheme}://{addr}"),
        db,
        upstream,
        state,
        accountant,
        client: client(),
        shutdown: Some(tx),
        task: Some(task),
    }
}

/// A client that trusts the tests' self-signed certificates and ignores proxies.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap()
}

/// The body of a GET to `url`, as text.
pub async fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

impl TestApp {
    /// Signals shutdown and waits for the gateway to stop (queue drained).
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("gateway task")
                .expect("gateway stops cleanly");
        }
    }

    /// Sends the shutdown signal without waiting.
    pub fn begin_shutdown(&mut self) -> Option<JoinHandle<anyhow::Result<()>>> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.take()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Points the throttler at a local KV server.
pub fn use_kv(config: &mut Config, kv: &FakeKv) {
    config.throttle.store = MarkerStoreKind::Cloudflare;
    config.cloudflare.api_base = kv.api_base();
    config.cloudflare.account_id = Some(FakeKv::ACCOUNT_ID.into());
    config.cloudflare.namespace_id = Some(FakeKv::NAMESPACE_ID.into());
    config.cloudflare.api_token = Some(SecretString::from(FakeKv::API_TOKEN));
}
