//! The fleet shares its markers through PostgreSQL (SPEC §8): a marker one replica
//! writes or removes is honoured by the others within a second, one process lists KV for
//! all and picks up markers written outside the fleet, and when that lister stops or
//! dies another takes over.

use std::time::{Duration, Instant};

use chrono::Utc;
use tollgate_testkit::fake_kv::FakeKv;

use super::*;

/// Polls every 5 ms until `check` holds; the instant it first did.
async fn when(check: impl Fn() -> bool) -> Option<Instant> {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if check() {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

fn list_calls(kv: &FakeKv) -> usize {
    kv.calls().iter().filter(|c| is_list(c)).count()
}

#[tokio::test]
async fn a_marker_one_replica_writes_or_removes_is_honoured_by_another_within_a_second() {
    let kv = FakeKv::start().await;
    // Listings are ten minutes apart: only PostgreSQL can carry the marker in time.
    let slow = |c: &mut Config| c.throttle.refresh_interval_ms = 600_000;
    let a = kv_app(&kv, slow).await;
    let b = replica_of(&a, &kv, slow).await;
    wait_for_lists(&kv, 1).await;
    let customer = a.signup().await;
    let account = customer.account_id;

    // `a` accounts the exhausting call and writes the marker.
    let exhausting = tokio::spawn({
        let (base, key, client) = (a.base.clone(), customer.api_key.clone(), a.client.clone());
        async move {
            for _ in 0..FREE_CALLS {
                let res = client
                    .get(format!("{base}{PATH}"))
                    .header("x-api-key", &key)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), StatusCode::OK);
            }
        }
    });
    let marked_on_a = when(|| a.state.throttler.is_marked(account, Utc::now())).await;
    let marked_on_b = when(|| b.state.throttler.is_marked(account, Utc::now())).await;
    exhausting.await.unwrap();
    let (marked_on_a, marked_on_b) = (marked_on_a.unwrap(), marked_on_b.unwrap());
    let lag = marked_on_b.saturating_duration_since(marked_on_a);
    assert!(
        lag < Duration::from_secs(1),
        "b honoured the marker {lag:?} after a"
    );
    assert!(kv.value(&marker_key(account)).is_some());
    assert_bucket_rule(account, &calls(&b, &customer.api_key, 200, IN_FLIGHT).await);

    // `b` takes the upgrade and removes the marker; `a` follows just as fast.
    upgrade(&b, account, 1_000).await;
    let cleared_on_b = when(|| !b.state.throttler.is_marked(account, Utc::now())).await;
    let cleared_on_a = when(|| !a.state.throttler.is_marked(account, Utc::now())).await;
    let restore_lag = cleared_on_a
        .unwrap()
        .saturating_duration_since(cleared_on_b.unwrap());
    assert!(
        restore_lag < Duration::from_secs(1),
        "a followed {restore_lag:?} after b"
    );
    assert_all_admitted(&calls(&a, &customer.api_key, 100, IN_FLIGHT).await);
    assert_eq!(list_calls(&kv), 1, "no listing carried either change");
    println!(
        "marker honoured by the other replica {lag:?} after the writer; \
         removal {restore_lag:?} after the remover; 1 KV listing in all"
    );
}

#[tokio::test]
async fn a_marker_written_outside_the_fleet_is_listed_by_one_process_for_all() {
    let kv = FakeKv::start().await;
    let started = Instant::now();
    let a = kv_app(&kv, |_| {}).await;
    let b = replica_of(&a, &kv, |_| {}).await;
    let c = replica_of(&a, &kv, |_| {}).await;
    let customer = a.signup().await;
    let account = customer.account_id;
    set_used(&a, account, FREE_CALLS).await;

    kv.insert(&marker_key(account), "1", Some(current_month_bounds().1));
    for replica in [&a, &b, &c] {
        wait_until_seen(replica, account).await;
        assert_bucket_rule(
            account,
            &calls(replica, &customer.api_key, 100, IN_FLIGHT).await,
        );
    }
    assert_eq!(
        a.state.throttler.stats().markers_written
            + b.state.throttler.stats().markers_written
            + c.state.throttler.stats().markers_written,
        0,
        "nobody wrote the marker again"
    );

    // Listing is one process's job: the fleet lists as often as one replica would.
    let listings: Vec<u64> = [&a, &b, &c]
        .iter()
        .map(|r| r.state.throttler.stats().listings)
        .collect();
    let elapsed = started.elapsed();
    let lists = list_calls(&kv);
    assert_eq!(
        listings.iter().filter(|&&n| n > 0).count(),
        1,
        "listings per replica: {listings:?}"
    );
    let one_lister = elapsed.as_millis() as usize / REFRESH_MS as usize + 2;
    assert!(lists <= one_lister, "{lists} listings in {elapsed:?}");
    println!(
        "3 replicas, {elapsed:?}: {lists} KV listings, by replica {listings:?} \
         (three listers every {REFRESH_MS} ms would have made about {})",
        3 * (elapsed.as_millis() as usize / REFRESH_MS as usize + 1)
    );
}

#[tokio::test]
async fn when_the_lister_stops_another_replica_takes_over_listing() {
    let kv = FakeKv::start().await;
    let a = kv_app(&kv, |_| {}).await;
    let b = replica_of(&a, &kv, |_| {}).await;
    let decided = eventually(WAIT, || async {
        a.state.throttler.is_lister() != b.state.throttler.is_lister()
    })
    .await;
    assert!(decided, "exactly one replica holds the lister's lease");
    let (mut lister, other) = if a.state.throttler.is_lister() {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(other.state.throttler.stats().listings, 0);

    lister.stop().await;
    let stopped = Instant::now();
    let customer = other.signup().await;
    set_used(&other, customer.account_id, FREE_CALLS).await;
    kv.insert(
        &marker_key(customer.account_id),
        "1",
        Some(current_month_bounds().1),
    );
    wait_until_seen(&other, customer.account_id).await;
    assert!(other.state.throttler.is_lister());
    assert!(other.state.throttler.stats().listings > 0);
    println!(
        "lister stopped; the other replica listed and saw a new KV marker {:?} later",
        stopped.elapsed()
    );
}

#[tokio::test]
async fn a_lister_that_dies_holding_the_lease_is_replaced_once_it_expires() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |_| {}).await;
    wait_for_lists(&kv, 1).await;
    // A process that took the lease and died: nobody renews or releases it.
    sqlx::query(
        "UPDATE fleet_lister SET holder = gen_random_uuid(),
                expires_at = now() + interval '3 seconds'",
    )
    .execute(&app.db.pool)
    .await
    .unwrap();
    let died = Instant::now();
    // A listing already under way may still finish; after that, silence.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = list_calls(&kv);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        list_calls(&kv),
        before,
        "nobody lists while the dead lease stands"
    );
    assert!(!app.state.throttler.is_lister());

    let customer = app.signup().await;
    set_used(&app, customer.account_id, FREE_CALLS).await;
    kv.insert(
        &marker_key(customer.account_id),
        "1",
        Some(current_month_bounds().1),
    );
    wait_until_seen(&app, customer.account_id).await;
    assert!(app.state.throttler.is_lister());
    let took_over = died.elapsed();
    assert!(took_over >= Duration::from_secs(3), "{took_over:?}");
    println!(
        "the dead lister's lease expired after 3 s; listing resumed {took_over:?} after it died"
    );
}
