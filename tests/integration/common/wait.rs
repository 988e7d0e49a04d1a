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
                self.wait_for_latencies().await;
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "ledger has {rows} rows, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Merges the latencies this gateway's accountant holds into the analytics (they are
    /// merged every `analytics.latency_flush_ms` after the batch that counted their
    /// calls), until two merges in a row find none: the batch that committed the rows
    /// just seen hands its latencies over right after its commit.
    pub async fn wait_for_latencies(&self) {
        let Some(accountant) = &self.accountant else {
            return;
        };
        let mut idle = 0;
        while idle < 2 {
            let merged = accountant.flush_latencies().await.expect("latencies merge");
            idle = if merged == 0 { idle + 1 } else { 0 };
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
