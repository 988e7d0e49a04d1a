//! Accounting throughput: the usage listener path fed as fast as it will take events.
//!
//! `cargo bench --bench accounting` creates a scratch database, then prints, for
//! 200,000 events over one hot account and over 10,000 accounts, the events per second
//! and the p99 accounting lag (event time to ledger transaction), and the cost per event
//! for a hot account with 0 and with 1,000,000 ledger rows already in its month, with
//! their ratio. PostgreSQL runs with its default durable commits. The scratch database
//! is dropped at the end. `TOLLGATE_BENCH_EVENTS` scales the event counts down for a
//! smoke run; under `cargo test` it runs with 5,000 events.

use std::time::{Duration, Instant};

use chrono::Utc;
use secrecy::SecretString;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate::config::UsageCheckConfig;
use tollgate::throttle::Throttler;
use tollgate::usage::listener::ListenerSettings;
use tollgate::usage::{Accountant, UsageEvent};
use uuid::Uuid;

const BATCH: usize = 1_000;

fn admin_url() -> String {
    std::env::var("TOLLGATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn event(account_id: i64) -> UsageEvent {
    UsageEvent {
        transaction_id: Uuid::new_v4(),
        account_id,
        key_id: account_id,
        occurred_at: Utc::now(),
        method: axum::http::Method::GET,
        route: "/vedic/v1/horoscope/daily".into(),
        upstream_status: 200,
        cost: 1,
        reserved_by: None,
    }
}

async fn create_accounts(pool: &PgPool, n: i64) -> Vec<i64> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash)
         SELECT 'bench-' || gen_random_uuid() || '@example.com', 'x' FROM generate_series(1, $1) RETURNING id",
    )
    .bind(n)
    .fetch_all(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
         SELECT id, 'free', now() - interval '1 year', 3000 FROM account WHERE id = ANY($1)",
    )
    .bind(&ids)
    .execute(pool)
    .await
    .unwrap();
    ids
}

/// Feeds `total` events through the real listener task, as fast as it takes them
/// (`rate` None) or paced at `rate` events/s; returns (events/s, p99 lag).
async fn through_listener(
    pool: &PgPool,
    accounts: &[i64],
    total: usize,
    rate: Option<u32>,
) -> (f64, Duration) {
    sqlx::query("DELETE FROM subscription_tracking")
        .execute(pool)
        .await
        .unwrap();
    let accountant = Accountant::new(pool.clone(), 3000, true, Throttler::disabled());
    let (tx, rx) = mpsc::channel(10_000);
    let stop = CancellationToken::new();
    let listener = tokio::spawn(tollgate::usage::listener::run(
        accountant,
        rx,
        // The listener as a deployment runs it by default, on the bench's pool of 8.
        ListenerSettings::from_config(
            &UsageCheckConfig {
                batch_size: BATCH,
                drain_timeout_ms: 600_000,
                ..Default::default()
            },
            8,
        ),
        stop.clone(),
    ));
    let started = Instant::now();
    match rate {
        None => {
            for i in 0..total {
                tx.send(event(accounts[i % accounts.len()])).await.unwrap();
            }
        }
        Some(rate) => {
            // Ticks of 10 ms, rate/100 events each.
            let per_tick = (rate / 100).max(1) as usize;
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let mut sent = 0;
            while sent < total {
                tick.tick().await;
                for _ in 0..per_tick.min(total - sent) {
                    tx.send(event(accounts[sent % accounts.len()]))
                        .await
                        .unwrap();
                    sent += 1;
                }
            }
        }
    }
    drop(tx);
    listener.await.unwrap();
    let elapsed = started.elapsed();
    let p99: f64 = sqlx::query_scalar(
        "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM recorded_at - occurred_at))::float8
         FROM subscription_tracking WHERE account_id = ANY($1)",
    )
    .bind(accounts)
    .fetch_one(pool)
    .await
    .unwrap();
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM subscription_tracking WHERE account_id = ANY($1)")
            .bind(accounts)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(rows as usize, total, "every event accounted once");
    (
        total as f64 / elapsed.as_secs_f64(),
        Duration::from_secs_f64(p99.max(0.0)),
    )
}

/// Median microseconds per event for batches alternating between two accounts, so
/// both are measured under the same conditions.
async fn cost_per_event(pool: &PgPool, accounts: [i64; 2], batches: usize) -> [f64; 2] {
    let accountant = Accountant::new(pool.clone(), 3000, true, Throttler::disabled());
    let mut samples = [Vec::new(), Vec::new()];
    for round in 0..batches * 2 {
        let which = round % 2;
        let batch: Vec<UsageEvent> = (0..BATCH).map(|_| event(accounts[which])).collect();
        let started = Instant::now();
        accountant.account(&batch, Utc::now()).await.unwrap();
        samples[which].push(started.elapsed().as_secs_f64() * 1e6 / BATCH as f64);
    }
    samples.map(|mut s| {
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    })
}

async fn preload_ledger(pool: &PgPool, account: i64, rows: i64) {
    sqlx::query(
        "INSERT INTO subscription_tracking
             (transaction_id, account_id, key_id, occurred_at, method, route, upstream_status)
         SELECT gen_random_uuid(), $1, $1, now(), 'GET', '/vedic/v1/x', 200 FROM generate_series(1, $2)",
    )
    .bind(account)
    .bind(rows)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO usage_counter (account_id, month_start, used)
         VALUES ($1, date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', $2)
         ON CONFLICT (account_id, month_start) DO UPDATE SET used = usage_counter.used + EXCLUDED.used",
    )
    .bind(account)
    .bind(rows)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("VACUUM ANALYZE subscription_tracking")
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; under `cargo test` this is a quick smoke run.
    let benching = std::env::args().any(|a| a == "--bench");
    let total: usize = std::env::var("TOLLGATE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if benching { 200_000 } else { 5_000 });
    let preload: i64 = (total as i64) * 5;
    let name = format!("tollgate_bench_{}", Uuid::new_v4().simple());
    let url = format!("{}/{name}", admin_url().rsplit_once('/').unwrap().0);
    tollgate::db::migrate(&SecretString::from(url.clone()))
        .await
        .unwrap();
    let pool = tollgate::db::connect(&SecretString::from(url.clone()), 8, Duration::from_secs(10))
        .await
        .unwrap();

    let paced: u32 = 10_000;
    let hot = create_accounts(&pool, 1).await;
    let many = create_accounts(&pool, 10_000).await;
    let (hot_rate, hot_sat_p99) = through_listener(&pool, &hot, total, None).await;
    let (many_rate, many_sat_p99) = through_listener(&pool, &many, total, None).await;
    let paced_total = (total / 4).max(BATCH);
    let (_, hot_p99) = through_listener(&pool, &hot, paced_total, Some(paced)).await;
    let (_, many_p99) = through_listener(&pool, &many, paced_total, Some(paced)).await;

    let fresh = create_accounts(&pool, 2).await;
    preload_ledger(&pool, fresh[1], preload).await;
    let batches = (total / BATCH / 8).max(5);
    let [cost_empty, cost_full] = cost_per_event(&pool, [fresh[0], fresh[1]], batches).await;

    println!("accounting benchmark ({total} events, batches of up to {BATCH}, durable commits)");
    println!(
        "{:<18} {:>12} {:>26} {:>30}",
        "spread", "max events/s", "p99 lag at max (queued)", "p99 lag paced at 10,000/s"
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (name, rate, sat, p99) in [
        ("1 hot account", hot_rate, hot_sat_p99, hot_p99),
        ("10,000 accounts", many_rate, many_sat_p99, many_p99),
    ] {
        println!(
            "{name:<18} {rate:>12.0} {:>23.1} ms {:>27.1} ms",
            ms(sat),
            ms(p99)
        );
    }
    println!("median cost per event (batches of {BATCH}, interleaved):");
    println!("  hot account starting at 0 rows this month:        {cost_empty:>7.1} us");
    println!("  hot account starting at {preload:>9} rows this month: {cost_full:>7.1} us");
    println!(
        "  ratio:                                            {:>7.2}",
        cost_full / cost_empty
    );

    pool.close().await;
    let admin = PgPool::connect(&admin_url()).await.unwrap();
    sqlx::query(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap();
}
