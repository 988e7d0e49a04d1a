//! Two replicas over one database and one KV namespace: a marker one writes is honoured
//! by the other, and only one write happens.

use std::time::{Duration, Instant};

use tollgate_testkit::fake_kv::FakeKv;

use super::*;

#[tokio::test]
async fn a_marker_written_by_another_replica_is_honoured_after_the_next_refresh() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| c.usage.free_monthly_calls = 1_000).await;
    let customer = app.signup().await;
    let account = customer.account_id;
    assert_all_admitted(&calls(&app, &customer.api_key, 50, 8).await);
    app.wait_for_ledger(account, 50).await;

    // Another replica accounts the rest of the month and writes the marker.
    sqlx::query("UPDATE usage_counter SET used = 1000 WHERE account_id = $1")
        .bind(account)
        .execute(&app.db.pool)
        .await
        .unwrap();
    kv.insert(&marker_key(account), "1", Some(current_month_bounds().1));
    let written = Instant::now();
    wait_until_seen(&app, account).await;
    assert!(
        written.elapsed() < Duration::from_millis(10 * REFRESH_MS),
        "seen only after {:?}",
        written.elapsed()
    );
    let outcomes = calls(&app, &customer.api_key, 500, IN_FLIGHT).await;
    let admitted = assert_bucket_rule(account, &outcomes);
    assert!(admitted.len() < 250, "{} of 500 admitted", admitted.len());
    assert_eq!(
        kv.value(&marker_key(account)).map(|(v, _)| v).as_deref(),
        Some("1"),
        "the replica left the foreign marker alone"
    );
    assert_eq!(app.state.throttler.stats().markers_written, 0);
}

#[tokio::test]
async fn two_replicas_over_one_database_and_one_kv_agree() {
    let kv = FakeKv::start().await;
    let a = kv_app(&kv, |_| {}).await;
    let mut config = test_config(&a.db, &a.upstream);
    use_kv(&mut config, &kv);
    config.usage.free_monthly_calls = FREE_CALLS;
    config.throttle.refresh_interval_ms = REFRESH_MS;
    let b = spawn_replica(a.db.clone(), a.upstream.clone(), config).await;

    let customer = a.signup().await;
    let account = customer.account_id;
    use_up_free_calls(&a, &customer).await;
    wait_until_marked(&a, &kv, account).await;
    wait_until_seen(&b, account).await;

    let on_b = calls(&b, &customer.api_key, 1_000, IN_FLIGHT).await;
    let admitted_b = assert_bucket_rule(account, &on_b);
    let on_a = calls(&a, &customer.api_key, 1_000, IN_FLIGHT).await;
    let admitted_a = assert_bucket_rule(account, &on_a);

    let total = FREE_CALLS + (admitted_a.len() + admitted_b.len()) as i64;
    a.wait_for_ledger(account, total).await;
    assert_eq!(upstream_ids(&a).len() as i64, total);
    let kv_calls = kv.calls();
    assert_eq!(
        count(
            &kv_calls,
            "PUT",
            &format!("/values/{}", marker_key(account))
        ),
        1
    );
    assert_eq!(a.state.throttler.stats().markers_written, 1);
    assert_eq!(b.state.throttler.stats().markers_written, 0);
}
