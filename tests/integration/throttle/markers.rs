//! Exhaustion markers in KV: their key and expiry, one write per exhaustion, none when
//! one is already there, removal on upgrade and on a stray marker's next call.

use chrono::{DateTime, Utc};
use tollgate::month::Month;
use tollgate_testkit::fake_kv::FakeKv;

use super::*;

#[tokio::test]
async fn a_written_marker_has_the_specs_key_and_expires_at_the_month_end() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |_| {}).await;
    let customer = app.signup().await;
    use_up_free_calls(&app, &customer).await;
    wait_until_marked(&app, &kv, customer.account_id).await;

    let (_, month_end) = current_month_bounds();
    let key = marker_key(customer.account_id);
    assert_eq!(kv.keys(), vec![key.clone()]);
    assert_eq!(kv.value(&key), Some(("1".to_owned(), Some(month_end))));
    let puts: Vec<_> = kv
        .calls()
        .into_iter()
        .filter(|c| c.method == "PUT")
        .collect();
    assert_eq!(puts.len(), 1);
    assert_eq!(puts[0].path, format!("/values/{key}"));
    assert_eq!(
        puts[0].query.as_deref(),
        Some(format!("expiration={month_end}").as_str())
    );
    let counted = eventually(WAIT, || async {
        app.state.throttler.stats().markers_written == 1
    })
    .await;
    assert!(counted, "the write was not counted");
}

#[tokio::test]
async fn a_marker_written_in_the_last_minute_of_a_month_lives_sixty_seconds() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |_| {}).await;
    let customer = app.signup().await;
    let month = Month::containing(Utc::now());
    let now: DateTime<Utc> = month.end() - chrono::Duration::seconds(30);

    // PostgreSQL agrees the account is used up (a marker it does not back is removed
    // right after it is written, SPEC §8).
    set_used(&app, customer.account_id, FREE_CALLS).await;
    app.state.throttler.exhaust(customer.account_id, month, now);
    wait_until_marked(&app, &kv, customer.account_id).await;

    let (_, expiration) = kv.value(&marker_key(customer.account_id)).unwrap();
    assert_eq!(expiration, Some(now.timestamp() + 60));
    assert!(now.timestamp() + 60 > month.end().timestamp());
}

#[tokio::test]
async fn a_marker_already_in_kv_is_read_but_not_written_again() {
    let kv = FakeKv::start().await;
    // Refresh rarely, so only the exhaust path can find the marker.
    let app = kv_app(&kv, |c| c.throttle.refresh_interval_ms = 600_000).await;
    let customer = app.signup().await;
    let account = customer.account_id;
    wait_for_lists(&kv, 1).await;
    let key = marker_key(account);
    let (_, month_end) = current_month_bounds();
    kv.insert(&key, "from-another-replica", Some(month_end));
    kv.clear_calls();

    use_up_free_calls(&app, &customer).await;
    wait_until_seen(&app, account).await;

    let seen = kv.calls();
    assert_eq!(count(&seen, "GET", &format!("/values/{key}")), 1);
    assert!(seen.iter().all(|c| c.method != "PUT"), "{seen:?}");
    assert_eq!(
        kv.value(&key),
        Some(("from-another-replica".to_owned(), Some(month_end)))
    );
    assert_eq!(app.state.throttler.stats().markers_written, 0);
    let outcomes = calls(&app, &customer.api_key, 200, IN_FLIGHT).await;
    assert_bucket_rule(account, &outcomes);
}

#[tokio::test]
async fn an_upgrade_removes_the_marker_and_admits_every_call_again() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |_| {}).await;
    let customer = app.signup().await;
    let account = customer.account_id;
    use_up_free_calls(&app, &customer).await;
    wait_until_marked(&app, &kv, account).await;
    let throttled = calls(&app, &customer.api_key, 100, IN_FLIGHT).await;
    let admitted = assert_bucket_rule(account, &throttled);
    assert!(admitted.len() < 100);

    upgrade(&app, account, 1_000).await;
    let key = &marker_key(account);
    let (app, kv) = (&app, &kv);
    let removed = eventually(WAIT, || async move {
        kv.value(key).is_none()
            && !app.state.throttler.is_marked(account, Utc::now())
            && app.state.throttler.stats().markers_removed == 1
    })
    .await;
    assert!(
        removed,
        "marker still present after the upgrade: in KV {:?}, in the view {}, removed {}",
        kv.value(key),
        app.state.throttler.is_marked(account, Utc::now()),
        app.state.throttler.stats().markers_removed
    );
    assert_eq!(count(&kv.calls(), "DELETE", &format!("/values/{key}")), 1);

    let outcomes = calls(app, &customer.api_key, 100, IN_FLIGHT).await;
    assert_all_admitted(&outcomes);
    let used = FREE_CALLS + admitted.len() as i64 + 100;
    app.wait_for_ledger(account, used).await;
    let usage = app.usage_of(account).await;
    assert_eq!(usage["plan"], "pro");
    assert_eq!(usage["exhausted"], false);
    assert_eq!(usage["remaining"], 1_000 - used);
}

#[tokio::test]
async fn a_stray_marker_on_an_account_with_allowance_is_removed_by_its_next_call() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| c.usage.free_monthly_calls = 1_000).await;
    let customer = app.signup().await;
    let account = customer.account_id;
    // A marker PostgreSQL does not back, as a replica racing an upgrade could leave.
    kv.insert(&marker_key(account), "1", Some(current_month_bounds().1));
    wait_until_seen(&app, account).await;

    // Calls until one is admitted (a fifth of a marked account's are), whose accounting
    // then finds the account with allowance: 20 calls all refused happen about once in
    // 90 runs.
    let mut admitted = false;
    for _ in 0..10 {
        let outcomes = calls(&app, &customer.api_key, 20, 4).await;
        if outcomes.iter().any(|o| o.status == StatusCode::OK) {
            admitted = true;
            break;
        }
    }
    assert!(admitted, "no call of 200 was admitted");
    let healed = eventually(WAIT, || async { kv.value(&marker_key(account)).is_none() }).await;
    assert!(healed, "the stray marker is still in KV");
    assert!(!app.state.throttler.is_marked(account, Utc::now()));
    assert_all_admitted(&calls(&app, &customer.api_key, 100, IN_FLIGHT).await);
}
