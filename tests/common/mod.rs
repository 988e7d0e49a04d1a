//! Shared test support: a fresh PostgreSQL database per test, and the real gateway
//! started on port 0 against a recording local upstream (and, when asked, a local
//! Cloudflare KV server).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::config::{Config, MarkerStoreKind};
use tollgate::usage::Accountant;
use tollgate::{AppState, Gateway};
use tollgate_testkit::fake_kv::FakeKv;
use tollgate_testkit::upstream::UpstreamServer;

pub const ADMIN_TOKEN: &str = "admin-test-token";
pub const SHARED_SECRET: &str = "upstream-shared-secret";

/// The server tests connect to for creating and dropping their databases.
pub fn admin_url() -> String {
    std::env::var("TOLLGATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn url_for(database: &str) -> String {
    let admin = admin_url();
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    format!("{base}/{database}")
}

/// A database of its own, migrated, dropped when the test ends.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

impl TestDb {
    /// Creates and fully migrates a fresh database.
    pub async fn new() -> Self {
        Self::migrated_to(None).await
    }

    /// Creates a fresh database migrated up to `target` (all when `None`).
    pub async fn migrated_to(target: Option<u32>) -> Self {
        let name = format!("tollgate_test_{}", uuid::Uuid::new_v4().simple());
        let url = url_for(&name);
        tollgate::db::migrate_to(&SecretString::from(url.clone()), target)
            .await
            .expect("test database can be created and migrated");
        let pool = tollgate::db::connect(
            &SecretString::from(url.clone()),
            20,
            Duration::from_secs(10),
        )
        .await
        .expect("test database answers");
        Self { name, url, pool }
    }

    /// Another pool on the same database, as a second replica would have.
    pub async fn second_pool(&self) -> PgPool {
        tollgate::db::connect(
            &SecretString::from(self.url.clone()),
            20,
            Duration::from_secs(10),
        )
        .await
        .expect("test database answers")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs inside the test's runtime; use a thread with its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok(pool) = sqlx::PgPool::connect(&admin_url()).await {
                    let _ =
                        sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                            .execute(&pool)
                            .await;
                }
            });
        })
        .join();
    }
}

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
    config
}

/// Points the throttler at a local KV server.
pub fn use_kv(config: &mut Config, kv: &FakeKv) {
    config.throttle.store = MarkerStoreKind::Cloudflare;
    config.cloudflare.api_base = kv.api_base();
    config.cloudflare.account_id = Some(FakeKv::ACCOUNT_ID.into());
    config.cloudflare.namespace_id = Some(FakeKv::NAMESPACE_ID.into());
    config.cloudflare.api_token = Some(SecretString::from(FakeKv::API_TOKEN));
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

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap()
}

/// A signed-up customer.
#[derive(Debug, Clone)]
pub struct Customer {
    pub account_id: i64,
    pub key_id: i64,
    pub api_key: String,
    pub email: String,
    pub password: String,
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Signs up a fresh customer.
    pub async fn signup(&self) -> Customer {
        let email = format!("{}@example.com", uuid::Uuid::new_v4().simple());
        let password = "correct horse battery".to_owned();
        let res = self
            .post_json(
                "/account/v1/signup",
                &json!({"email": email, "password": password}),
            )
            .await;
        assert_eq!(res.status(), 201, "signup");
        let body: Value = res.json().await.unwrap();
        Customer {
            account_id: body["account_id"].as_i64().unwrap(),
            key_id: body["key_id"].as_i64().unwrap(),
            api_key: body["api_key"].as_str().unwrap().to_owned(),
            email,
            password,
        }
    }

    /// Logs a customer in and returns the session token.
    pub async fn login(&self, customer: &Customer) -> String {
        let res = self
            .post_json(
                "/account/v1/login",
                &json!({"email": customer.email, "password": customer.password}),
            )
            .await;
        assert_eq!(res.status(), 200, "login");
        let body: Value = res.json().await.unwrap();
        body["token"].as_str().unwrap().to_owned()
    }

    /// One proxied GET with an API key.
    pub async fn call(&self, path: &str, api_key: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .header("x-api-key", api_key)
            .send()
            .await
            .unwrap()
    }

    pub async fn admin_post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// The admin usage object of an account in the current month.
    pub async fn usage_of(&self, account_id: i64) -> Value {
        let res = self
            .admin_get(&format!("/admin/v1/accounts/{account_id}/usage"))
            .await;
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }

    /// Ledger rows of an account.
    pub async fn ledger_rows(&self, account_id: i64) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM subscription_tracking WHERE account_id = $1")
            .bind(account_id)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    /// Waits until the account has `n` ledger rows (accounting is asynchronous).
    pub async fn wait_for_ledger(&self, account_id: i64, n: i64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let rows = self.ledger_rows(account_id).await;
            if rows >= n {
                assert_eq!(rows, n, "more ledger rows than calls");
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "ledger has {rows} rows, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

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

/// Polls `check` until it holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
