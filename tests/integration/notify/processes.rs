//! Real `tollgate` processes: a gateway SIGKILLed with attempts in flight loses no event,
//! and `tollgate worker` delivers what it accounts from the JetStream stream.

use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tollgate_testkit::upstream::UpstreamServer;

use super::*;
use crate::common::{
    ADMIN_TOKEN, SHARED_SECRET, TestDb, client, spawn_replica, spawn_tollgate, test_config,
};
use crate::jetstream::{TestStream, free_port};

/// One `tollgate` process, killed (SIGKILL) when dropped.
struct Tollgate {
    child: Child,
}

impl Tollgate {
    /// Starts `tollgate <command>` with `env` and waits until `ready` answers 200.
    async fn start(command: &str, env: &[(String, String)], ready: &str, logs: &Path) -> Self {
        let log_path = logs.join(format!("{command}.log"));
        let child = spawn_tollgate(command, env, &log_path);
        let up = eventually(Duration::from_secs(30), || async {
            client()
                .get(ready)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        assert!(up, "tollgate {command} did not start:\n{text}");
        Self { child }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Tollgate {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What every process of a test shares: its database and upstream, as environment.
fn base_env(db: &TestDb, upstream: &UpstreamServer) -> Vec<(String, String)> {
    [
        ("TOLLGATE__DATABASE__URL", db.url.clone()),
        ("TOLLGATE__DATABASE__MAX_CONNECTIONS", "6".into()),
        ("TOLLGATE__UPSTREAM__BASE_URL", upstream.base_url()),
        ("TOLLGATE__UPSTREAM__SHARED_SECRET", SHARED_SECRET.into()),
        ("TOLLGATE__ADMIN__TOKEN", ADMIN_TOKEN.into()),
        ("TOLLGATE__THROTTLE__STORE", "memory".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A `tollgate serve` on free ports; returns it and its public base URL.
async fn serve(mut env: Vec<(String, String)>, logs: &Path) -> (Tollgate, String) {
    let port = free_port();
    env.push((
        "TOLLGATE__SERVER__LISTEN".into(),
        format!("127.0.0.1:{port}"),
    ));
    env.push((
        "TOLLGATE__SERVER__METRICS_LISTEN".into(),
        format!("127.0.0.1:{}", free_port()),
    ));
    let base = format!("http://127.0.0.1:{port}");
    let process = Tollgate::start("serve", &env, &format!("{base}/readyz"), logs).await;
    (process, base)
}

async fn post(base: &str, path: &str, bearer: Option<&str>, body: Value) -> Value {
    let mut req = client().post(format!("{base}{path}")).json(&body);
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    let res = req.send().await.unwrap();
    assert!(res.status().is_success(), "{path}: {}", res.status());
    res.json().await.unwrap()
}

/// A new customer of the gateway at `base`, on a plan of 5 units, who makes 5 calls
/// (crossing 80 % and 100 %); returns the account id.
async fn customer_crossing_both(base: &str) -> i64 {
    let email = format!("{}@example.com", uuid::Uuid::new_v4().simple());
    let body = json!({"email": email, "password": "correct horse battery"});
    let signed = post(base, "/account/v1/signup", None, body).await;
    let id = signed["account_id"].as_i64().unwrap();
    let plan = json!({"plan": "tiny", "monthly_allowance": 5});
    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    post(base, &path, Some(ADMIN_TOKEN), plan).await;
    let key = signed["api_key"].as_str().unwrap();
    for _ in 0..5 {
        let res = client()
            .get(format!("{base}{DAILY}"))
            .header("x-api-key", key)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    id
}

/// Both accounts' events, each delivered once, each account's in threshold order.
fn assert_each_delivered_once_in_order(receiver: &Receiver, (a, b): (i64, i64)) {
    let mut pairs = delivered_pairs(receiver);
    pairs.sort_by_key(|(account, _)| *account);
    assert_eq!(pairs, [(a, 80), (a, 100), (b, 80), (b, 100)]);
    assert!(deliveries_per_id(receiver).values().all(|n| *n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_while_delivering_loses_no_event() {
    let receiver = Receiver::start().await;
    receiver.answer(Answer::Hang);
    let db = Arc::new(TestDb::new().await);
    let upstream = Arc::new(UpstreamServer::start().await.unwrap());
    let logs = tempfile::tempdir().unwrap();
    let mut env = base_env(&db, &upstream);
    env.extend(notify_env(&receiver));
    let (mut gateway, base) = serve(env, logs.path()).await;
    let a = customer_crossing_both(&base).await;
    let b = customer_crossing_both(&base).await;
    let recorded = eventually(Duration::from_secs(10), || async {
        outbox(&db.pool).await.len() == 4 && !receiver.requests().is_empty()
    })
    .await;
    assert!(recorded, "{:?}", outbox(&db.pool).await);
    // SIGKILL with attempts in flight: no shutdown, the lease left to expire.
    gateway.kill();
    receiver.answer(Answer::Ok);
    assert!(receiver.delivered().is_empty());

    let mut config = test_config(&db, &upstream);
    notify_to(&mut config, &receiver);
    let _next = spawn_replica(db.clone(), upstream.clone(), config).await;
    wait_for_delivered(&receiver, 4, Duration::from_secs(15)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_each_delivered_once_in_order(&receiver, (a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_delivers_the_events_it_accounts_from_the_stream() {
    let receiver = Receiver::start().await;
    let db = TestDb::new().await;
    let upstream = UpstreamServer::start().await.unwrap();
    let js = TestStream::new();
    let logs = tempfile::tempdir().unwrap();
    // The gateway only publishes; webhooks are configured on the worker alone.
    let mut env = base_env(&db, &upstream);
    env.extend(js.env());
    let mut publishing = env.clone();
    publishing.push(("TOLLGATE__USAGE_CHECK__CONSUME".into(), "false".into()));
    let (_gateway, base) = serve(publishing, logs.path()).await;
    let metrics = free_port();
    env.extend(notify_env(&receiver));
    env.push((
        "TOLLGATE__SERVER__METRICS_LISTEN".into(),
        format!("127.0.0.1:{metrics}"),
    ));
    let ready = format!("http://127.0.0.1:{metrics}/readyz");
    let _worker = Tollgate::start("worker", &env, &ready, logs.path()).await;

    let a = customer_crossing_both(&base).await;
    let b = customer_crossing_both(&base).await;
    wait_for_delivered(&receiver, 4, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_each_delivered_once_in_order(&receiver, (a, b));
    let event = &receiver.delivered()[0];
    let signature = event.signature.as_deref().expect("signed");
    assert!(signature_verifies(signature, &event.body, SECRET));
}
