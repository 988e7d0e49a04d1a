//! Bodies stream through the gateway both ways: 100 MB each way in bounded memory.
//!
//! Its own test binary, so the process's peak memory is this test's alone. It shares
//! only the fresh database of the integration tests; the little else it needs is here.

#[path = "integration/common/db.rs"]
mod db;

use db::TestDb;
use futures_util::StreamExt;
use secrecy::SecretString;
use serde_json::{Value, json};
use tollgate::Gateway;
use tollgate::config::{Config, MarkerStoreKind};
use tollgate_testkit::upstream::UpstreamServer;

const HUNDRED_MB: usize = 100 * 1024 * 1024;

/// The gateway on port 0 over its own database and the local upstream; it runs until
/// the test's runtime ends.
struct TestApp {
    base: String,
    client: reqwest::Client,
    _db: TestDb,
    _upstream: UpstreamServer,
}

struct Customer {
    api_key: String,
}

async fn spawn_app() -> TestApp {
    let db = TestDb::new().await;
    let upstream = UpstreamServer::start().await.expect("upstream starts");
    let mut config = Config::default();
    config.database.url = SecretString::from(db.url.clone());
    config.upstream.base_url = upstream.base_url();
    config.upstream.shared_secret = Some(SecretString::from("upstream-shared-secret"));
    config.upstream.timeout_ms = 5_000;
    config.throttle.store = MarkerStoreKind::Memory;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gateway = Gateway::build(config, db.pool.clone())
        .await
        .expect("gateway builds");
    tokio::spawn(gateway.run(listener, None, std::future::pending()));
    TestApp {
        base: format!("http://{addr}"),
        client: reqwest::Client::builder().no_proxy().build().unwrap(),
        _db: db,
        _upstream: upstream,
    }
}

impl TestApp {
    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    async fn signup(&self) -> Customer {
        let email = format!("{}@example.com", uuid::Uuid::new_v4().simple());
        let body = json!({"email": email, "password": "correct horse battery"});
        let res = self
            .client
            .post(self.url("/account/v1/signup"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201, "signup");
        let body: Value = res.json().await.unwrap();
        Customer {
            api_key: body["api_key"].as_str().unwrap().to_owned(),
        }
    }

    async fn call(&self, path: &str, api_key: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .header("x-api-key", api_key)
            .send()
            .await
            .unwrap()
    }
}

fn peak_rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_upload_and_download_pass_in_bounded_memory() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    // Warm up connections and allocator pools before the baseline.
    assert_eq!(
        app.call("/vedic/v1/bytes/1048576", &customer.api_key)
            .await
            .status(),
        200
    );
    let baseline = peak_rss_bytes();

    let chunk = bytes::Bytes::from(vec![b'u'; 64 * 1024]);
    let upload = futures_util::stream::iter(
        (0..HUNDRED_MB / chunk.len()).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
    );
    let res = app
        .client
        .post(app.url("/vedic/v1/count"))
        .header("x-api-key", &customer.api_key)
        .header("content-length", HUNDRED_MB)
        .body(reqwest::Body::wrap_stream(upload))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let answer: serde_json::Value = res.json().await.unwrap();
    assert_eq!(answer["received_bytes"], HUNDRED_MB);

    let res = app
        .call(
            &format!("/western/v1/bytes/{HUNDRED_MB}"),
            &customer.api_key,
        )
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-length"],
        HUNDRED_MB.to_string().as_str()
    );
    let mut received = 0usize;
    let mut stream = res.bytes_stream();
    while let Some(chunk) = stream.next().await {
        received += chunk.unwrap().len();
    }
    assert_eq!(received, HUNDRED_MB);

    let growth = peak_rss_bytes().saturating_sub(baseline);
    assert!(
        growth < 40 * 1024 * 1024,
        "peak memory grew by {} MB while moving 200 MB",
        growth / (1024 * 1024)
    );
}
