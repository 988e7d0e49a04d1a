//! An exhaustion on one replica racing a restore (an upgrade) on another settles on the
//! account's standing in PostgreSQL within seconds (SPEC §8), never waiting for the
//! hourly reconciliation.

use std::time::{Duration, Instant};

use chrono::Utc;
use tollgate::month::Month;
use tollgate_testkit::fake_kv::FakeKv;

use super::*;

/// The methods of the requests for the account's marker key, in order.
fn marker_requests(kv: &FakeKv, account_id: i64) -> Vec<String> {
    let path = format!("/values/{}", marker_key(account_id));
    kv.calls()
        .into_iter()
        .filter(|c| c.path == path)
        .map(|c| c.method)
        .collect()
}

#[tokio::test]
async fn an_exhaustion_landing_after_an_upgrade_elsewhere_is_undone_within_seconds() {
    let kv = FakeKv::start().await;
    // No listing and no reconciliation can clean up during the test.
    let quiet = |c: &mut Config| {
        c.throttle.refresh_interval_ms = 600_000;
        c.throttle.reconcile_interval_ms = 3_600_000;
    };
    let a = kv_app(&kv, quiet).await;
    let b = replica_of(&a, &kv, quiet).await;
    wait_for_lists(&kv, 1).await;
    let customer = a.signup().await;
    let account = customer.account_id;
    use_up_free_calls(&a, &customer).await;
    wait_until_marked(&a, &kv, account).await;
    wait_until_seen(&b, account).await;

    // `b` takes the upgrade: the marker goes everywhere.
    upgrade(&b, account, 1_000).await;
    let key = marker_key(account);
    let removed = eventually(WAIT, || async {
        kv.value(&key).is_none() && !a.state.throttler.is_marked(account, Utc::now())
    })
    .await;
    assert!(removed, "the upgrade removed the marker");
    assert_eq!(marker_requests(&kv, account), ["GET", "PUT", "DELETE"]);

    // `a` decided the exhaustion before the upgrade committed; its write lands only now.
    let late = Instant::now();
    a.state
        .throttler
        .exhaust(account, Month::containing(Utc::now()), Utc::now());
    let landed = eventually(WAIT, || async {
        marker_requests(&kv, account)
            .iter()
            .filter(|m| *m == "PUT")
            .count()
            == 2
    })
    .await;
    assert!(landed, "the late exhaustion wrote its marker");

    // PostgreSQL says the account has units: the writer removes its own marker.
    let settled = eventually(WAIT, || async {
        kv.value(&key).is_none()
            && !a.state.throttler.is_marked(account, Utc::now())
            && !b.state.throttler.is_marked(account, Utc::now())
    })
    .await;
    let took = late.elapsed();
    assert!(settled, "the stale marker stayed");
    assert!(took < Duration::from_secs(5), "settled only after {took:?}");
    assert_eq!(
        marker_requests(&kv, account),
        ["GET", "PUT", "DELETE", "GET", "PUT", "DELETE"]
    );
    let row: (bool, String) = sqlx::query_as(
        "SELECT marked, changed_by FROM fleet_marker WHERE kind = 'month' AND account_id = $1",
    )
    .bind(account)
    .fetch_one(&a.db.pool)
    .await
    .unwrap();
    assert_eq!(row, (false, "restore".to_owned()));
    for replica in [&a, &b] {
        assert_all_admitted(&calls(replica, &customer.api_key, 100, IN_FLIGHT).await);
    }
    println!("a marker written after an upgrade on another replica was gone {took:?} later");
}

#[tokio::test]
async fn an_exhaustion_postgresql_still_backs_survives_its_recheck() {
    let kv = FakeKv::start().await;
    let a = kv_app(&kv, |_| {}).await;
    let b = replica_of(&a, &kv, |_| {}).await;
    let customer = a.signup().await;
    let account = customer.account_id;
    // Both replicas account the exhausting calls at once and both judge the account used up.
    let on_a = calls(&a, &customer.api_key, FREE_CALLS as usize, 1);
    let on_b = calls(&b, &customer.api_key, FREE_CALLS as usize, 1);
    let (on_a, on_b) = tokio::join!(on_a, on_b);
    assert!(on_a.iter().chain(&on_b).any(|o| o.status == StatusCode::OK));
    wait_until_seen(&a, account).await;
    wait_until_seen(&b, account).await;
    // Long enough for any re-check to have run: the marker is still there, everywhere.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(kv.value(&marker_key(account)).is_some());
    assert!(a.state.throttler.is_marked(account, Utc::now()));
    assert!(b.state.throttler.is_marked(account, Utc::now()));
    assert!(!marker_requests(&kv, account).contains(&"DELETE".to_owned()));
    assert_eq!(a.usage_of(account).await["exhausted"], true);
}

#[tokio::test]
async fn a_marker_handed_over_before_its_batch_commits_survives_the_recheck() {
    let kv = FakeKv::start().await;
    let a = kv_app(&kv, |c| c.throttle.reconcile_interval_ms = 3_600_000).await;
    let customer = a.signup().await;
    let account = customer.account_id;
    // As accounting does: the account locked, its month used up, the marker handed to
    // the throttler, and only then the commit.
    let mut batch = a.db.pool.begin().await.unwrap();
    assert!(
        tollgate::db::lock_account(&mut batch, account)
            .await
            .unwrap()
    );
    set_used_in(&mut *batch, account, FREE_CALLS).await;
    a.state
        .throttler
        .exhaust(account, Month::containing(Utc::now()), Utc::now());
    wait_for_kv_call(&kv, "PUT", &format!("/values/{}", marker_key(account))).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    batch.commit().await.unwrap();

    // The re-check read what the batch committed: the marker stays.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(marker_requests(&kv, account), ["GET", "PUT"]);
    assert!(kv.value(&marker_key(account)).is_some());
    assert!(a.state.throttler.is_marked(account, Utc::now()));
    assert_eq!(a.usage_of(account).await["exhausted"], true);
}
