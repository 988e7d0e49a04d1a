//! Waiting for what happens asynchronously: a condition in general, and the ledger
//! rows the usage listener writes.

use std::time::Duration;

use super::TestApp;

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

impl TestApp {
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
                self.wait_for_latencies(account_id).await;
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "ledger has {rows} rows, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every accounted call of the account has its latency in the analytics:
    /// they are merged into the rollup every `analytics.latency_flush_ms`, after the
    /// batch that counted the call.
    pub async fn wait_for_latencies(&self, account_id: i64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let behind: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM usage_rollup
                 WHERE account_id = $1
                   AND calls > (SELECT coalesce(sum(x), 0) FROM unnest(latency) x)",
            )
            .bind(account_id)
            .fetch_one(&self.db.pool)
            .await
            .unwrap();
            if behind == 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{behind} rollup rows still wait for their latencies"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
