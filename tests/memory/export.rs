//! The usage CSV of a month with 100,000 accounts streams in bounded memory; the test
//! prints its peak memory growth and time. Measured in a debug build: 30 MB of growth at
//! 20,000 accounts and the same 30 MB at 100,000 (one page's work, not the month's).

use std::time::Instant;

use futures_util::StreamExt;

use crate::app::*;

const ACCOUNTS: i64 = 100_000;
const ADMIN_TOKEN: &str = "memory-admin-token";

fn peak_rss_bytes() -> usize {
    status_bytes("VmHWM:")
}

async fn export(app: &TestApp, month: &str) -> (usize, usize) {
    let res = app
        .client
        .get(app.url(&format!("/admin/v1/usage/export?month={month}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let (mut bytes, mut lines) = (0, 0);
    let mut body = res.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.unwrap();
        bytes += chunk.len();
        lines += chunk.iter().filter(|b| **b == b'\n').count();
    }
    (bytes, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_csv_of_100_000_accounts_streams_in_bounded_memory() {
    let _alone = measuring_alone().await;
    let app = spawn_app_with(|c| {
        c.admin.token = Some(ADMIN_TOKEN.to_owned().into());
    })
    .await;
    // 100,000 accounts with usage in March 2025, a third of them on a paid plan, with
    // their calls per day.
    sqlx::query(
        "WITH a AS (INSERT INTO account (email, password_hash)
                    SELECT 'customer' || i || '@example.com', 'x' FROM generate_series(1, $1) i
                    RETURNING id),
              s AS (INSERT INTO subscription (account_id, plan, monthly_allowance, starts_at)
                    SELECT id, 'pro', 100000, '2025-01-01Z' FROM a WHERE id % 3 = 0),
              d AS (INSERT INTO usage_daily_closed (account_id, day_start, calls, used)
                    SELECT id, '2025-03-10Z', id % 97 + 1, id % 97 + 1 FROM a)
         INSERT INTO usage_counter (account_id, month_start, used)
         SELECT id, '2025-03-01Z', id % 97 + 1 FROM a",
    )
    .bind(ACCOUNTS)
    .execute(app.pool())
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(app.pool()).await.unwrap();
    // Warm up connections and allocator pools before the baseline.
    export(&app, "2025-02").await;
    let baseline = peak_rss_bytes();

    let started = Instant::now();
    let (bytes, lines) = export(&app, "2025-03").await;
    let took = started.elapsed();
    let growth = peak_rss_bytes().saturating_sub(baseline);
    println!(
        "usage export: {ACCOUNTS} accounts, {bytes} bytes in {:.2} s; peak memory grew by {:.1} MB",
        took.as_secs_f64(),
        growth as f64 / (1024.0 * 1024.0)
    );
    assert_eq!(lines as i64, ACCOUNTS + 1);
    assert!(
        growth < 48 * 1024 * 1024,
        "peak memory grew by {} MB for a {} MB export",
        growth / (1024 * 1024),
        bytes / (1024 * 1024)
    );
}
