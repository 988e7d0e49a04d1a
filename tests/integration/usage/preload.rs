//! A replica that starts while accounts are calling reads their standings at start, a
//! page at a time: their first calls through it read nothing from PostgreSQL, while an
//! account without calls this month is read on its first call.

use std::path::Path;
use std::process::Child;

use super::*;
use crate::common::*;
use crate::jetstream::free_port;

/// A `tollgate serve` on the test's database, killed when dropped.
struct Replica {
    child: Child,
    base: String,
    metrics: String,
}

impl Replica {
    async fn start(app: &TestApp, logs: &Path) -> Self {
        let (port, metrics_port) = (free_port(), free_port());
        let env: Vec<(String, String)> = [
            ("TOLLGATE__DATABASE__URL", app.db.url.clone()),
            ("TOLLGATE__UPSTREAM__BASE_URL", app.upstream.base_url()),
            ("TOLLGATE__UPSTREAM__SHARED_SECRET", SHARED_SECRET.into()),
            ("TOLLGATE__THROTTLE__STORE", "memory".into()),
            ("TOLLGATE__SERVER__LISTEN", format!("127.0.0.1:{port}")),
            (
                "TOLLGATE__SERVER__METRICS_LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let log = logs.join("replica.log");
        let child = spawn_tollgate("serve", &env, &log);
        let replica = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            metrics: format!("http://127.0.0.1:{metrics_port}/metrics"),
        };
        wait_until_ready(&replica.base, &log).await;
        replica
    }

    /// `tollgate_standing_reads_total{source}` as the replica's metrics listener says.
    async fn reads(&self, source: &str) -> u64 {
        let text = get_text(&self.metrics).await;
        let series = format!("tollgate_standing_reads_total{{source=\"{source}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
            .unwrap_or(0)
    }

    /// One proxied call; its status and the remaining units its quota header reports.
    async fn call(&self, api_key: &str) -> (u16, i64) {
        let res = client()
            .get(format!("{}{DAILY}", self.base))
            .header("x-api-key", api_key)
            .send()
            .await
            .unwrap();
        let ratelimit = res.headers()["ratelimit"].to_str().unwrap().to_owned();
        let remaining = ratelimit
            .split(';')
            .find_map(|p| p.strip_prefix("r="))
            .and_then(|r| r.split(',').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no remaining units in {ratelimit:?}"));
        (res.status().as_u16(), remaining)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_replica_reads_this_months_standings_at_start_not_on_each_first_call() {
    let app = spawn_app().await;
    let mut calling = Vec::new();
    for _ in 0..3 {
        let customer = app.signup().await;
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
        app.wait_for_ledger(customer.account_id, 1).await;
        calling.push(customer);
    }
    // Signed up, but no call this month yet.
    let quiet = app.signup().await;
    let logs = tempfile::tempdir().unwrap();

    let replica = Replica::start(&app, logs.path()).await;
    let preloaded = eventually(Duration::from_secs(10), || async {
        replica.reads("start").await >= 3
    })
    .await;
    assert!(
        preloaded,
        "{} standings read at start; the replica's log:\n{}",
        replica.reads("start").await,
        std::fs::read_to_string(logs.path().join("replica.log")).unwrap_or_default()
    );
    for customer in &calling {
        // The standing it read at start holds the call the first gateway accounted.
        assert_eq!(replica.call(&customer.api_key).await, (200, FREE - 1));
    }
    assert_eq!(
        replica.reads("call").await,
        0,
        "a preloaded account was read again"
    );

    assert_eq!(replica.call(&quiet.api_key).await, (200, FREE));
    assert_eq!(replica.reads("call").await, 1);
}
