//! Accounting throughput: the usage listener path fed as fast as it will take events.
//!
//! `cargo bench --bench accounting` creates a scratch database, then prints, for
//! 200,000 events over one hot account and over 10,000 accounts, the events per second
//! and the p99 accounting lag (event time to ledger transaction), and the cost per event
//! for a hot account with 0 and with 1,000,000 ledger rows already in its month, with
//! their ratio. For each saturated run it also prints PostgreSQL's own CPU per accounted
//! event: utime + stime of the backends serving the scratch database (read from
//! `/proc/<pid>/stat`, so PostgreSQL must run on this host) over the timed part, divided
//! by the events accounted. `TOLLGATE_BENCH_LEDGER_ROWS` preloads that many ledger rows
//! into this month (on accounts of their own) before the runs, to see whether the cost
//! stays flat as the month fills. PostgreSQL runs with its default durable commits. The
//! scratch database is dropped at the end. `TOLLGATE_BENCH_EVENTS` scales the event counts
//! down for a smoke run; under `cargo test` it runs with 5,000 events. Events carry
//! latencies, merged into the rollup every `TOLLGATE_BENCH_LATENCY_FLUSH_MS` (default
//! 5,000, the deployment's default; 1 merges after about every batch).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use secrecy::SecretString;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate::config::UsageCheckConfig;
use tollgate::throttle::Throttler;
use tollgate::usage::accounting::listener::ListenerSettings;
use tollgate::usage::accounting::{Accountant, UsageEvent};
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
        key_reserved_by: None,
        // Each call's upstream latency, as the proxy measures it: 1 to 21 ms.
        latency_us: Some(
            1_000
                + (account_id.unsigned_abs() * 7_919 + Uuid::new_v4().as_u128() as u64 % 5_000)
                    % 20_000,
        ),
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
    // One key per account, numbered as the account (the events name it), so the usage
    // rollup gets its rows as in a deployment.
    sqlx::query(
        "INSERT INTO api_key (id, account_id, key_hash, prefix) OVERRIDING SYSTEM VALUE
         SELECT id, id, sha256(convert_to('tgk_bench' || id, 'UTF8')), 'tgk_bench' FROM account
         WHERE id = ANY($1)",
    )
    .bind(&ids)
    .execute(pool)
    .await
    .unwrap();
    ids
}

/// CPU seconds (user + system) PostgreSQL's processes serving database `name` have used
/// so far, by pid. Backends that exit between two samples are lost, so the pool keeps its
/// connections for the whole run (sqlx's idle timeout is 10 minutes).
async fn pg_cpu(pool: &PgPool, name: &str) -> HashMap<i32, f64> {
    let pids: Vec<i32> = sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE datname = $1")
        .bind(name)
        .fetch_all(pool)
        .await
        .unwrap();
    let ticks = clock_ticks();
    pids.into_iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // Fields after the command (which may hold spaces) end with ')'; utime and
            // stime are fields 14 and 15, i.e. 12th and 13th after it.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split(' ').collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((pid, (utime + stime) / ticks))
        })
        .collect()
}

/// sysconf(_SC_CLK_TCK), through getconf; 100 on every Linux in practice.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds used between two samples (a backend absent before started from zero).
fn cpu_between(before: &HashMap<i32, f64>, after: &HashMap<i32, f64>) -> f64 {
    after
        .iter()
        .map(|(pid, t)| t - before.get(pid).copied().unwrap_or(0.0))
        .sum()
}

/// What one run through the listener measured.
struct Run {
    events_per_s: f64,
    p99: Duration,
    /// PostgreSQL CPU microseconds per accounted event.
    pg_us: f64,
}

/// Feeds `total` events through the real listener task, as fast as it takes them
/// (`rate` None) or paced at `rate` events/s.
async fn through_listener(
    pool: &PgPool,
    name: &str,
    accounts: &[i64],
    total: usize,
    rate: Option<u32>,
) -> Run {
    sqlx::query("DELETE FROM subscription_tracking WHERE account_id = ANY($1)")
        .bind(accounts)
        .execute(pool)
        .await
        .unwrap();
    let accountant = Accountant::new(pool.clone(), 3000, true, Throttler::disabled());
    let (tx, rx) = mpsc::channel(10_000);
    let stop = CancellationToken::new();
    // The latencies are merged as a deployment merges them (every 5 s by default), and
    // once more at the end, inside the measured window.
    let stop_merging = CancellationToken::new();
    let every = std::env::var("TOLLGATE_BENCH_LATENCY_FLUSH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let merging = accountant.merge_latencies(Duration::from_millis(every), stop_merging.clone());
    let listener = tokio::spawn(tollgate::usage::accounting::listener::run(
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
    let cpu_before = pg_cpu(pool, name).await;
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
    stop_merging.cancel();
    merging.await.unwrap();
    let elapsed = started.elapsed();
    let cpu = cpu_between(&cpu_before, &pg_cpu(pool, name).await);
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
    Run {
        events_per_s: total as f64 / elapsed.as_secs_f64(),
        p99: Duration::from_secs_f64(p99.max(0.0)),
        pg_us: cpu * 1e6 / total as f64,
    }
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

/// Adds `rows` ledger rows this month, spread over `accounts` and over the month so far,
/// with the counters agreeing.
async fn preload_ledger(pool: &PgPool, accounts: &[i64], rows: i64) {
    sqlx::query(
        "INSERT INTO subscription_tracking
             (transaction_id, account_id, key_id, occurred_at, method, route, upstream_status)
         SELECT gen_random_uuid(), a, a,
                greatest(date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
                         now() - random() * interval '20 days'),
                'GET', '/vedic/v1/x', 200
         FROM generate_series(1, $2) i, LATERAL (SELECT ($1::bigint[])[1 + i % cardinality($1)] AS a) s",
    )
    .bind(accounts)
    .bind(rows)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO usage_counter (account_id, month_start, used)
         SELECT account_id, date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*)
         FROM subscription_tracking WHERE account_id = ANY($1) GROUP BY account_id
         ON CONFLICT (account_id, month_start) DO UPDATE SET used = EXCLUDED.used",
    )
    .bind(accounts)
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
    let ledger_rows: i64 = std::env::var("TOLLGATE_BENCH_LEDGER_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
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
    if ledger_rows > 0 {
        let filler = create_accounts(&pool, 1_000).await;
        preload_ledger(&pool, &filler, ledger_rows).await;
    }
    let hot_sat = through_listener(&pool, &name, &hot, total, None).await;
    let many_sat = through_listener(&pool, &name, &many, total, None).await;
    let paced_total = (total / 4).max(BATCH);
    let hot_paced = through_listener(&pool, &name, &hot, paced_total, Some(paced)).await;
    let many_paced = through_listener(&pool, &name, &many, paced_total, Some(paced)).await;

    let fresh = create_accounts(&pool, 2).await;
    preload_ledger(&pool, &fresh[1..], preload).await;
    let batches = (total / BATCH / 8).max(5);
    let [cost_empty, cost_full] = cost_per_event(&pool, [fresh[0], fresh[1]], batches).await;

    println!(
        "accounting benchmark ({total} events, batches of up to {BATCH}, durable commits, \
         {ledger_rows} ledger rows preloaded this month)"
    );
    println!(
        "{:<18} {:>12} {:>26} {:>30} {:>16}",
        "spread",
        "max events/s",
        "p99 lag at max (queued)",
        "p99 lag paced at 10,000/s",
        "PG CPU at max"
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (spread, sat, paced) in [
        ("1 hot account", &hot_sat, &hot_paced),
        ("10,000 accounts", &many_sat, &many_paced),
    ] {
        println!(
            "{spread:<18} {:>12.0} {:>23.1} ms {:>27.1} ms {:>9.1} us/ev",
            sat.events_per_s,
            ms(sat.p99),
            ms(paced.p99),
            sat.pg_us
        );
    }
    // Counter updates that stayed on their page (HOT) skip every index.
    let hot_updates: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
         WHERE relname = 'usage_counter'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for (table, updates, hot) in hot_updates {
        println!(
            "{table}: {hot} of {updates} updates HOT ({:.0} %)",
            hot as f64 * 100.0 / updates.max(1) as f64
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
