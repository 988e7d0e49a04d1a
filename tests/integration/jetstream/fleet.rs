//! The fleet (SPEC §1 `tollgate worker`, §8): real `tollgate` processes over one
//! PostgreSQL database and one NATS server, killed with SIGKILL where the SPEC says
//! what that may cost. Each test has its own database and its own stream, subject and
//! consumer (deleted when it ends); the upstream and the load generator run in the
//! test. Figures are printed (`cargo test --test fleet -- --nocapture`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{TestStream, free_port, load};
use crate::common::{ADMIN_TOKEN, SHARED_SECRET, TestDb, eventually, spawn_tollgate};
use serde_json::{Value, json};
use tollgate_testkit::upstream::UpstreamServer;
use uuid::Uuid;

/// One `tollgate` process, its output in a log file; killed when dropped.
struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(name: &str, command: &str, env: &[(String, String)], logs: &Path) -> Self {
        let log = logs.join(format!("{name}.log"));
        let child = spawn_tollgate(command, env, &log);
        Self {
            name: name.into(),
            child,
            log,
        }
    }

    /// SIGKILL: no shutdown, no drain, nothing flushed.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until `url` answers 200, failing with the log's tail when the process died.
    async fn wait_ready(&mut self, url: &str) {
        let client = crate::common::client();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(res) = client.get(url).send().await
                && res.status() == 200
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}):\n{}", self.name, self.tail());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} not ready:\n{}",
                self.name,
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What every process of a test's fleet shares.
struct Fleet {
    db: TestDb,
    upstream: UpstreamServer,
    js: TestStream,
    logs: tempfile::TempDir,
}

impl Fleet {
    async fn new() -> Self {
        Self {
            db: TestDb::new().await,
            upstream: UpstreamServer::start().await.expect("upstream starts"),
            js: TestStream::new(),
            logs: tempfile::tempdir().unwrap(),
        }
    }

    fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("TOLLGATE__DATABASE__URL", self.db.url.clone()),
            ("TOLLGATE__DATABASE__MAX_CONNECTIONS", "6".into()),
            ("TOLLGATE__UPSTREAM__BASE_URL", self.upstream.base_url()),
            ("TOLLGATE__UPSTREAM__SHARED_SECRET", SHARED_SECRET.into()),
            ("TOLLGATE__ADMIN__TOKEN", ADMIN_TOKEN.into()),
            ("TOLLGATE__THROTTLE__STORE", "memory".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        env.extend(self.js.env());
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    /// A `serve` process; returns it and its public base URL.
    async fn serve(&self, name: &str, extra: &[(&str, &str)]) -> (Process, String, u16) {
        let (port, metrics) = (free_port(), free_port());
        let listen = format!("127.0.0.1:{port}");
        let metrics_listen = format!("127.0.0.1:{metrics}");
        let mut env = self.env(extra);
        env.push(("TOLLGATE__SERVER__LISTEN".into(), listen));
        env.push(("TOLLGATE__SERVER__METRICS_LISTEN".into(), metrics_listen));
        let mut process = Process::spawn(name, "serve", &env, self.logs.path());
        let base = format!("http://127.0.0.1:{port}");
        process.wait_ready(&format!("{base}/readyz")).await;
        (process, base, metrics)
    }

    /// A `worker` process; returns it and its metrics port.
    async fn worker(&self, name: &str, extra: &[(&str, &str)]) -> (Process, u16) {
        let metrics = free_port();
        let mut env = self.env(extra);
        env.push((
            "TOLLGATE__SERVER__METRICS_LISTEN".into(),
            format!("127.0.0.1:{metrics}"),
        ));
        let mut process = Process::spawn(name, "worker", &env, self.logs.path());
        process
            .wait_ready(&format!("http://127.0.0.1:{metrics}/readyz"))
            .await;
        (process, metrics)
    }

    async fn ledger_ids(&self) -> Vec<Uuid> {
        sqlx::query_scalar("SELECT transaction_id FROM subscription_tracking")
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
    }

    /// Waits until the stream holds nothing unaccounted (bounded).
    async fn wait_until_accounted(&self, within: Duration) {
        let done = eventually(within, || async { self.js.messages().await == 0 }).await;
        assert!(
            done,
            "the stream still holds {} messages",
            self.js.messages().await
        );
    }
}

/// Signs up a customer through a gateway; returns its API key.
async fn signup(base: &str) -> String {
    let email = format!("{}@example.com", Uuid::new_v4().simple());
    let res = crate::common::client()
        .post(format!("{base}/account/v1/signup"))
        .json(&json!({"email": email, "password": "correct horse battery"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let body: Value = res.json().await.unwrap();
    body["api_key"].as_str().unwrap().to_owned()
}

/// The sum of a metric over its labels, from a process's metrics listener.
async fn metric(port: u16, name: &str) -> f64 {
    let text = crate::common::get_text(&format!("http://127.0.0.1:{port}/metrics")).await;
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `X-Request-Id`s of every call the upstream received.
fn upstream_ids(upstream: &UpstreamServer) -> HashSet<Uuid> {
    upstream
        .recorded()
        .iter()
        .filter_map(|r| r.headers.get("x-request-id")?.to_str().ok()?.parse().ok())
        .collect()
}

fn assert_distinct(ids: &[Uuid]) {
    let distinct: HashSet<&Uuid> = ids.iter().collect();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "a transaction is in the ledger twice"
    );
}

/// SPEC §8: "A replica killed with SIGKILL loses at most the calls it had in flight;
/// none that the stream acknowledged." In flight at the kill: the calls the load
/// generator was waiting for (at most one per connection) and the answered calls whose
/// event the stream had not acknowledged yet (at most about one per connection too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_under_load_loses_at_most_its_calls_in_flight() {
    const CONNECTIONS: usize = 16;
    let fleet = Fleet::new().await;
    let (mut gateway, base, _) = fleet.serve("gateway", &[]).await;
    let mut keys = Vec::new();
    for _ in 0..4 {
        keys.push(signup(&base).await);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(load(
        vec![base.clone()],
        keys,
        CONNECTIONS,
        u64::MAX,
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    gateway.kill();
    stop.store(true, Ordering::Relaxed);
    let seen = load.await.unwrap();
    let answered_upstream = upstream_ids(&fleet.upstream);

    let (_restarted, _, _) = fleet.serve("gateway-restarted", &[]).await;
    fleet.wait_until_accounted(Duration::from_secs(30)).await;
    let ledger = fleet.ledger_ids().await;
    let in_ledger: HashSet<Uuid> = ledger.iter().copied().collect();
    let ok_missing = seen.answered.difference(&in_ledger).count();
    let lost = answered_upstream.len() - ledger.len().min(answered_upstream.len());
    println!(
        "gateway SIGKILLed under load ({CONNECTIONS} connections), then restarted: upstream \
         answered {}, client got {} 2xx ({} calls cut by the kill), ledger {} rows; \
         lost {lost} upstream answers, {ok_missing} of them answered 2xx to the client",
        answered_upstream.len(),
        seen.ok,
        seen.failed,
        ledger.len(),
    );
    assert_distinct(&ledger);
    assert!(
        in_ledger.is_subset(&answered_upstream),
        "a ledger row for a call the upstream never answered"
    );
    assert!(seen.ok > 50, "the load ran ({} calls)", seen.ok);
    assert!(
        ok_missing <= CONNECTIONS,
        "{ok_missing} answered calls lost"
    );
    assert!(lost <= 2 * CONNECTIONS, "{lost} calls lost");
}

/// SPEC §8: any number of `serve` replicas that only publish and any number of workers,
/// over one stream: one ledger row per transaction, equal to the responses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_publishing_replicas_and_two_workers_keep_an_exact_ledger() {
    let fleet = Fleet::new().await;
    let publish_only = [("TOLLGATE__USAGE_CHECK__CONSUME", "false")];
    let (_a, base_a, _) = fleet.serve("serve-a", &publish_only).await;
    let (_b, base_b, _) = fleet.serve("serve-b", &publish_only).await;
    let (_w1, metrics_1) = fleet.worker("worker-1", &[]).await;
    let (_w2, metrics_2) = fleet.worker("worker-2", &[]).await;
    let mut keys = Vec::new();
    for base in [&base_a, &base_b, &base_a, &base_b] {
        keys.push(signup(base).await);
    }

    let never = Arc::new(AtomicBool::new(false));
    let seen = load(vec![base_a, base_b], keys, 8, 1_200, never).await;
    assert_eq!((seen.ok, seen.failed, seen.other), (1_200, 0, 0));
    let exact = eventually(Duration::from_secs(30), || async {
        fleet.ledger_ids().await.len() >= seen.answered.len()
    })
    .await;
    let ledger = fleet.ledger_ids().await;
    let acked = (
        metric(metrics_1, "tollgate_jetstream_messages_acked_total").await,
        metric(metrics_2, "tollgate_jetstream_messages_acked_total").await,
    );
    println!(
        "2 publishing replicas, 2 workers: {} responses, {} ledger rows; worker-1 acknowledged \
         {}, worker-2 {}",
        seen.answered.len(),
        ledger.len(),
        acked.0,
        acked.1
    );
    assert!(exact, "the ledger did not catch up");
    assert_distinct(&ledger);
    assert_eq!(
        ledger.iter().copied().collect::<HashSet<_>>(),
        seen.answered
    );
    fleet.wait_until_accounted(Duration::from_secs(10)).await;
}

/// A worker SIGKILLed while its transaction waits for a row lock: nothing of its batch
/// committed, and after `ack_wait` another worker accounts every message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_batch_has_its_messages_redelivered_and_accounted_once() {
    const CALLS: usize = 20;
    let fleet = Fleet::new().await;
    let (_serve, base, _) = fleet
        .serve("serve", &[("TOLLGATE__USAGE_CHECK__CONSUME", "false")])
        .await;
    let key = signup(&base).await;
    let account_id: i64 = sqlx::query_scalar("SELECT max(id) FROM account")
        .fetch_one(&fleet.db.pool)
        .await
        .unwrap();
    let never = Arc::new(AtomicBool::new(false));
    let seen = load(vec![base], vec![key], 4, CALLS as u64, never).await;
    assert_eq!(seen.ok, CALLS as u64);
    let published = eventually(Duration::from_secs(10), || async {
        fleet.js.messages().await == CALLS as u64
    })
    .await;
    assert!(published, "the calls' events are in the stream");

    // Hold the account's row lock, so the first worker's transaction waits on it.
    let mut lock = fleet.db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM account WHERE id = $1 FOR UPDATE")
        .bind(account_id)
        .execute(&mut *lock)
        .await
        .unwrap();
    let (mut first, _) = fleet
        .worker(
            "worker-killed",
            &[("TOLLGATE__USAGE_CHECK__LOCK_TIMEOUT_MS", "60000")],
        )
        .await;
    let blocked = eventually(Duration::from_secs(10), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&fleet.db.pool)
        .await
        .unwrap();
        waiting > 0
    })
    .await;
    assert!(blocked, "the first worker never waited for the row lock");
    let held = eventually(Duration::from_secs(5), || async {
        fleet.js.consumer_state().await.1 == CALLS
    })
    .await;
    assert!(held, "the first worker holds every message unacknowledged");
    first.kill();
    lock.rollback().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fleet.ledger_ids().await.len(),
        0,
        "the killed worker committed nothing"
    );

    let (_second, metrics) = fleet.worker("worker-second", &[]).await;
    let accounted = eventually(Duration::from_secs(20), || async {
        fleet.ledger_ids().await.len() >= CALLS
    })
    .await;
    fleet.wait_until_accounted(Duration::from_secs(10)).await;
    let ledger = fleet.ledger_ids().await;
    let redelivered = metric(metrics, "tollgate_jetstream_messages_redelivered_total").await;
    println!(
        "worker SIGKILLed mid-batch: {CALLS} calls, {} ledger rows after the second worker, \
         which was redelivered {redelivered} messages",
        ledger.len()
    );
    assert!(accounted, "the second worker did not account the batch");
    assert_distinct(&ledger);
    assert_eq!(
        ledger.iter().copied().collect::<HashSet<_>>(),
        seen.answered
    );
    assert!(redelivered >= CALLS as f64);
}

#[tokio::test]
async fn migrate_creates_the_stream_and_the_consumer_once() {
    let fleet = Fleet::new().await;
    let env = fleet.env(&[]);
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("migrate")
            .env_clear()
            .env(
                "TOLLGATE_CONFIG_DIR",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
            )
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let first = run();
    assert!(
        first.contains(&format!("JetStream stream {}: created", fleet.js.stream)),
        "{first}"
    );
    assert!(
        first.contains(&format!(
            "JetStream consumer {}: created",
            fleet.js.consumer
        )),
        "{first}"
    );
    let second = run();
    assert!(
        second.contains("stream") && second.matches("already there").count() == 2,
        "{second}"
    );

    let js = fleet.js.jetstream().await;
    let mut stream = js.get_stream(&fleet.js.stream).await.unwrap();
    let config = stream.info().await.unwrap().config.clone();
    assert_eq!(config.subjects, vec![fleet.js.subject.clone()]);
    assert!(config.duplicate_window >= Duration::from_secs(120));
    let consumer = stream.consumer_info(&fleet.js.consumer).await.unwrap();
    assert_eq!(
        consumer.config.ack_wait,
        Duration::from_millis(fleet.js.ack_wait_ms)
    );
}

#[test]
fn a_worker_without_the_jetstream_transport_exits_with_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("worker")
        .env_clear()
        .env(
            "TOLLGATE_CONFIG_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config"),
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("usage_check.transport = \"jetstream\""),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_spill_gauge_counts_events_waiting_for_nats_and_settles_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut nats) = super::NatsServer::start(dir.path()) else {
        eprintln!("SKIPPED: no nats-server binary (install Debian's nats-server package)");
        return;
    };
    let mut fleet = Fleet::new().await;
    fleet.js = TestStream::on(&nats.url());
    let (_serve, base, metrics_port) = fleet.serve("serve", &[]).await;
    let key = signup(&base).await;
    let call = || async {
        let res = crate::common::client()
            .get(format!("{base}/vedic/v1/horoscope"))
            .header("x-api-key", &key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    };
    let spill = || metric(metrics_port, "tollgate_jetstream_spill_depth");
    let settled = || async {
        spill().await == 0.0
            && metric(metrics_port, "tollgate_jetstream_publish_in_flight").await == 0.0
    };

    for _ in 0..20 {
        call().await;
    }
    fleet.wait_until_accounted(Duration::from_secs(10)).await;
    assert!(
        eventually(Duration::from_secs(5), settled).await,
        "nothing left to publish"
    );

    nats.kill();
    for _ in 0..5 {
        call().await;
    }
    let waiting = eventually(Duration::from_secs(10), || async { spill().await >= 5.0 }).await;
    assert!(waiting, "five events wait for NATS: {}", spill().await);

    nats.restart();
    fleet.wait_until_accounted(Duration::from_secs(30)).await;
    let ledger = eventually(Duration::from_secs(30), || async {
        fleet.ledger_ids().await.len() == 25
    })
    .await;
    assert!(ledger, "every call accounted once NATS is back");
    assert!(
        eventually(Duration::from_secs(5), settled).await,
        "the gauges settle at zero"
    );
}
