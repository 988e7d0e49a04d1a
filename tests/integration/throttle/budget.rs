//! One Cloudflare budget for the whole fleet (SPEC §8): whatever the number of replicas
//! and of marked accounts, the calls all processes make on one token stay within
//! `throttle.kv_call_budget` per `throttle.kv_budget_window_ms`; a call the fleet's
//! budget refuses is not sent, fails open and is counted.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tollgate_testkit::fake_kv::FakeKv;

use super::*;

const REPLICAS: usize = 4;
const MARKERS: i64 = 20_000;
const BUDGET: u32 = 120;
const WINDOW: Duration = Duration::from_secs(6);
/// Accounts of the markers written outside the fleet (no such accounts exist here).
const FIRST_OUTSIDE: i64 = 10_000_000;

/// The most calls that arrived within any span of `window`.
fn most_in_any_window(times: &[Instant], window: Duration) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (last, at) in times.iter().enumerate() {
        while at.duration_since(times[first]) >= window {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most
}

/// The sum of a Prometheus counter over all its label sets.
fn counter(name: &str) -> f64 {
    tollgate::telemetry::prometheus()
        .render()
        .lines()
        .filter(|line| line.starts_with(name) && !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn four_replicas_and_twenty_thousand_markers_stay_within_one_fleet_budget() {
    let kv = FakeKv::start().await;
    let (_, month_end) = current_month_bounds();
    for i in 0..MARKERS {
        kv.insert(&marker_key(FIRST_OUTSIDE + i), "1", Some(month_end));
    }
    let budget = |c: &mut Config| {
        c.throttle.kv_call_budget = BUDGET;
        c.throttle.kv_budget_window_ms = WINDOW.as_millis() as u64;
    };
    let started = Instant::now();
    let mut replicas = vec![kv_app(&kv, budget).await];
    for _ in 1..REPLICAS {
        let replica = replica_of(&replicas[0], &kv, budget).await;
        replicas.push(replica);
    }

    // Every replica honours the markers listed outside the fleet...
    for replica in &replicas {
        wait_until_seen(replica, FIRST_OUTSIDE).await;
        wait_until_seen(replica, FIRST_OUTSIDE + MARKERS - 1).await;
    }
    // ...and the fleet keeps writing markers: one customer runs out on each replica.
    for replica in &replicas {
        let customer = replica.signup().await;
        use_up_free_calls(replica, &customer).await;
        wait_until_marked(replica, &kv, customer.account_id).await;
    }
    // Three whole windows of listing at the pace the budget allows.
    let run = 3 * WINDOW;
    tokio::time::sleep(run.saturating_sub(started.elapsed())).await;
    let elapsed = started.elapsed();

    let timed = kv.timed_calls();
    let times: Vec<Instant> = timed.iter().map(|(at, _)| *at).collect();
    let most = most_in_any_window(&times, WINDOW);
    let pages = (MARKERS as usize).div_ceil(1_000);
    let lists = timed.iter().filter(|(_, c)| is_list(c)).count();
    let others = timed.len() - lists;
    let listings: Vec<u64> = replicas
        .iter()
        .map(|r| r.state.throttler.stats().listings)
        .collect();
    let refresh = Duration::from_millis(REFRESH_MS);
    let before_per_replica =
        (pages as u128 * WINDOW.as_millis() / refresh.as_millis()).min(BUDGET as u128);
    println!(
        "{REPLICAS} replicas, {MARKERS} markers ({pages} pages per listing), budget {BUDGET} \
         per {WINDOW:?}, refresh {refresh:?}: over {elapsed:?} KV saw {} calls ({lists} list \
         pages, about {:.1} listings, by replica {listings:?}; {others} reads/writes); most in any \
         {WINDOW:?} window: {most}. Per-replica listing would have asked {} calls per window \
         (R·⌈M/1000⌉·W/I) and, each replica capped by its own budget, sent {}.",
        timed.len(),
        lists as f64 / pages as f64,
        REPLICAS as u128 * pages as u128 * WINDOW.as_millis() / refresh.as_millis(),
        REPLICAS as u128 * before_per_replica,
    );
    assert!(
        most <= BUDGET as usize,
        "{most} calls within one {WINDOW:?} window, budget {BUDGET}"
    );
    assert!(
        lists >= 2 * pages,
        "the lister kept listing within the budget"
    );
    // Listings take at most half of the budget per window (plus one listing in flight).
    let windows = (elapsed.as_secs_f64() / WINDOW.as_secs_f64()).ceil() as usize;
    let share = BUDGET as usize / 2 * windows + pages;
    assert!(
        lists <= share,
        "{lists} list pages in {elapsed:?}, share {share}"
    );
    assert_eq!(
        listings.iter().filter(|&&n| n > 0).count(),
        1,
        "one lister: {listings:?}"
    );
}

#[tokio::test]
async fn a_budget_other_processes_spent_refuses_this_ones_calls_and_fails_open() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| c.throttle.kv_call_budget = 50).await;
    wait_for_lists(&kv, 1).await;
    // Other processes on the token have spent the window's 50 calls.
    let token_id = hex::encode(&Sha256::digest(FakeKv::API_TOKEN.as_bytes())[..8]);
    let spent = sqlx::query(
        "UPDATE kv_budget SET granted = ARRAY(SELECT now() FROM generate_series(1, 50))
         WHERE token_id = $1",
    )
    .bind(&token_id)
    .execute(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(spent.rows_affected(), 1, "the token's budget row exists");
    tokio::time::sleep(Duration::from_millis(3 * REFRESH_MS)).await;
    kv.clear_calls();
    let skipped_before = counter("tollgate_kv_budget_skipped_total");

    let customer = app.signup().await;
    use_up_free_calls(&app, &customer).await;
    let tried = eventually(WAIT, || async { app.state.throttler.stats().fail_open > 0 }).await;
    assert!(tried, "the marker write was never attempted");
    assert_all_admitted(&calls(&app, &customer.api_key, 100, IN_FLIGHT).await);
    assert!(kv.calls().is_empty(), "{:?}", kv.calls());
    assert!(kv.keys().is_empty());
    assert!(counter("tollgate_kv_budget_skipped_total") > skipped_before);
}
