//! JetStream support shared by the transport's tests: a stream, subject and consumer of
//! the test's own (deleted when it ends, so tests never share state), a private
//! `nats-server` child that a test may kill and restart, and a load generator that
//! remembers the request id of every answer.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use secrecy::SecretString;
use tollgate::config::{Config, UsageTransport};

/// The NATS server tests use unless they start their own (`scripts/ensure-nats.sh`).
pub fn nats_url() -> String {
    std::env::var("TOLLGATE_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// Names of this test's own: stream, subject, consumer.
pub struct TestStream {
    pub url: String,
    pub stream: String,
    pub subject: String,
    pub consumer: String,
    /// Redelivery delay of the consumer this test creates.
    pub ack_wait_ms: u64,
}

impl TestStream {
    /// Fresh names on the shared test server.
    pub fn new() -> Self {
        Self::on(&nats_url())
    }

    /// Fresh names on the server at `url`.
    pub fn on(url: &str) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Self {
            url: url.into(),
            stream: format!("TEST_USAGE_{id}"),
            subject: format!("test.usage.{id}"),
            consumer: format!("test-accounting-{id}"),
            ack_wait_ms: 2_000,
        }
    }

    /// Points `config` at this stream with the JetStream transport.
    pub fn apply(&self, config: &mut Config) {
        config.usage_check.transport = UsageTransport::Jetstream;
        config.nats.url = SecretString::from(self.url.clone());
        config.nats.stream = self.stream.clone();
        config.nats.subject = self.subject.clone();
        config.nats.consumer = self.consumer.clone();
        config.nats.ack_wait_ms = self.ack_wait_ms;
    }

    /// The same, as the environment of a `tollgate` process.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("TOLLGATE__USAGE_CHECK__TRANSPORT", "jetstream".to_owned()),
            ("TOLLGATE__NATS__URL", self.url.clone()),
            ("TOLLGATE__NATS__STREAM", self.stream.clone()),
            ("TOLLGATE__NATS__SUBJECT", self.subject.clone()),
            ("TOLLGATE__NATS__CONSUMER", self.consumer.clone()),
            ("TOLLGATE__NATS__ACK_WAIT_MS", self.ack_wait_ms.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    pub async fn jetstream(&self) -> jetstream::Context {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .connect(self.url.as_str())
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "no NATS server with JetStream at {} ({e}); scripts/ensure-nats.sh starts one",
                    self.url
                )
            });
        jetstream::new(client)
    }

    /// Messages in the stream (on the work queue: not yet accounted).
    pub async fn messages(&self) -> u64 {
        let mut stream = self
            .jetstream()
            .await
            .get_stream(&self.stream)
            .await
            .unwrap();
        stream.info().await.unwrap().state.messages
    }

    /// `(pending, ack_pending, redelivered)` of the consumer.
    pub async fn consumer_state(&self) -> (u64, usize, usize) {
        let stream = self
            .jetstream()
            .await
            .get_stream(&self.stream)
            .await
            .unwrap();
        let info = stream.consumer_info(&self.consumer).await.unwrap();
        (info.num_pending, info.num_ack_pending, info.num_redelivered)
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        let (url, stream) = (self.url.clone(), self.stream.clone());
        // Drop runs inside the test's runtime; use a thread with its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let connect = async_nats::ConnectOptions::new()
                    .connection_timeout(Duration::from_secs(2))
                    .connect(url.as_str());
                if let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(3), connect).await
                {
                    let js = jetstream::new(client);
                    let _ = tokio::time::timeout(Duration::from_secs(3), js.delete_stream(&stream))
                        .await;
                }
            });
        })
        .join();
    }
}

/// A `nats-server -js` of the test's own, on a fixed port and store folder so that it
/// can be killed and started again where it was.
pub struct NatsServer {
    pub port: u16,
    store: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// The server binary, or `None` (the test then says why it is skipped).
pub fn nats_server_binary() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("TOLLGATE_TEST_NATS_SERVER").map(PathBuf::from),
        Some(PathBuf::from("/usr/sbin/nats-server")),
        Some(PathBuf::from("/usr/bin/nats-server")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

impl NatsServer {
    /// Starts a server storing under `dir`; `None` when no binary is installed.
    pub fn start(dir: &Path) -> Option<Self> {
        nats_server_binary()?;
        let mut server = Self {
            port: free_port(),
            store: dir.join("store"),
            log: dir.join("nats-server.log"),
            child: None,
        };
        server.restart();
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: no goodbye to its clients, nothing flushed beyond what the OS holds.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and store; returns once it listens.
    pub fn restart(&mut self) {
        let binary = nats_server_binary().expect("nats-server binary");
        let child = Command::new(binary)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.store)
            .arg("-l")
            .arg(&self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nats-server did not listen on {} (log: {})",
                self.port,
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// What a load generator saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// `X-Request-Id` of every answer the upstream gave (any status but the gateway's own).
    pub answered: HashSet<uuid::Uuid>,
    /// Calls that got a 2xx.
    pub ok: u64,
    /// Calls that got no answer at all (connection refused or cut).
    pub failed: u64,
    /// Answers that were not 2xx.
    pub other: u64,
}

/// Calls `bases` in turn at `concurrency`, each connection with a key of `keys`, until
/// `stop` is set or `max_calls` were made; returns what it saw.
pub async fn load(
    bases: Vec<String>,
    keys: Vec<String>,
    concurrency: usize,
    max_calls: u64,
    stop: Arc<AtomicBool>,
) -> Seen {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let made = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for slot in 0..concurrency {
        let (bases, keys, stop, seen, made) = (
            bases.clone(),
            keys.clone(),
            stop.clone(),
            seen.clone(),
            made.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            let mut n = slot;
            while !stop.load(Ordering::Relaxed) && made.fetch_add(1, Ordering::Relaxed) < max_calls
            {
                let base = &bases[n % bases.len()];
                let key = &keys[n % keys.len()];
                n += 1;
                let sent = client
                    .get(format!("{base}/vedic/v1/horoscope/daily?n={n}"))
                    .header("x-api-key", key)
                    .send()
                    .await;
                let failed = {
                    let mut seen = seen.lock().unwrap();
                    match sent {
                        Ok(res) if res.status().is_success() => {
                            seen.ok += 1;
                            let id = res.headers()["x-request-id"].to_str().unwrap();
                            seen.answered.insert(id.parse().unwrap());
                        }
                        Ok(_) => seen.other += 1,
                        Err(_) => seen.failed += 1,
                    }
                    seen.failed
                };
                if failed > 0 {
                    // The gateway is gone: do not spin.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

mod fleet;
mod inprocess;
