//! Every way the KV path can fail (server errors, timeouts, rate limiting, missing
//! configuration, a spent call budget, a stale view) fails open.

use std::time::Duration;

use tollgate_testkit::fake_kv::{FakeKv, Fault};

use super::*;

/// Uses up a fresh customer's grant while the KV path is broken and checks that every
/// call is still admitted, in two rounds: the second one after the listener has seen
/// the exhaustion and the throttler has tried (and failed) to write the marker.
async fn exhausted_account_is_still_admitted(app: &TestApp) -> Customer {
    let customer = app.signup().await;
    let account = customer.account_id;
    use_up_free_calls(app, &customer).await;
    assert_all_admitted(&calls(app, &customer.api_key, 100, 8).await);
    app.wait_for_ledger(account, FREE_CALLS + 100).await;
    assert_all_admitted(&calls(app, &customer.api_key, 100, 8).await);
    app.wait_for_ledger(account, FREE_CALLS + 200).await;
    let usage = app.usage_of(account).await;
    assert_eq!(usage["exhausted"], true);
    assert_eq!(usage["used"], FREE_CALLS + 200);
    // A timed-out write is counted when its timeout fires, which may be after the ledger
    // caught up.
    let counted = eventually(WAIT, || async { app.state.throttler.stats().fail_open > 0 }).await;
    assert!(counted, "the failure was not counted");
    customer
}

#[tokio::test]
async fn kv_server_errors_fail_open_and_a_later_call_writes_the_marker() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |_| {}).await;
    wait_for_lists(&kv, 2).await;
    kv.set_fault(Fault::ServerError);

    let customer = exhausted_account_is_still_admitted(&app).await;
    let key = &marker_key(customer.account_id);
    wait_for_kv_call(&kv, "GET", &format!("/values/{key}")).await;
    assert!(kv.keys().is_empty());

    // Cloudflare is back: a later call of the account retries the write.
    kv.set_fault(Fault::None);
    let written = eventually(WAIT, || async {
        call_once(&app, &customer.api_key).await;
        kv.value(key).is_some()
    })
    .await;
    assert!(written, "the marker was never retried");
    wait_until_seen(&app, customer.account_id).await;
    let outcomes = calls(&app, &customer.api_key, 200, IN_FLIGHT).await;
    assert_bucket_rule(customer.account_id, &outcomes);
}

#[tokio::test]
async fn kv_timeouts_fail_open() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| c.throttle.kv_timeout_ms = 200).await;
    wait_for_lists(&kv, 2).await;
    kv.set_fault(Fault::Delay(Duration::from_secs(2)));

    let customer = exhausted_account_is_still_admitted(&app).await;
    let key = marker_key(customer.account_id);
    wait_for_kv_call(&kv, "GET", &format!("/values/{key}")).await;
    assert!(kv.calls().iter().all(|c| c.method != "PUT"));
    assert!(kv.keys().is_empty());
}

#[tokio::test]
async fn kv_rate_limiting_without_retry_after_fails_open_and_backs_off() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |_| {}).await;
    wait_for_lists(&kv, 2).await;
    kv.set_fault(Fault::RateLimited {
        retry_after_secs: None,
    });
    // Every call recorded from here on was answered 429.
    let before = kv.calls().len();

    exhausted_account_is_still_admitted(&app).await;
    assert!(kv.keys().is_empty());
    // One 429, then nothing more goes to Cloudflare during the back-off.
    assert!(
        kv.calls().len() - before <= 1,
        "{:?}",
        &kv.calls()[before..]
    );
}

#[tokio::test]
async fn kv_rate_limiting_with_retry_after_fails_open() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |_| {}).await;
    wait_for_lists(&kv, 2).await;
    kv.set_fault(Fault::RateLimited {
        retry_after_secs: Some(1),
    });

    exhausted_account_is_still_admitted(&app).await;
    assert!(kv.keys().is_empty());
}

#[tokio::test]
async fn missing_cloudflare_configuration_fails_open() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| {
        c.cloudflare.account_id = None;
        c.cloudflare.namespace_id = None;
        c.cloudflare.api_token = None;
    })
    .await;

    exhausted_account_is_still_admitted(&app).await;
    assert!(kv.calls().is_empty(), "no configuration, no calls");
}

#[tokio::test]
async fn a_spent_call_budget_fails_open_without_calling_cloudflare() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| c.throttle.kv_call_budget = 0).await;

    exhausted_account_is_still_admitted(&app).await;
    assert!(kv.calls().is_empty(), "{:?}", kv.calls());
}

#[tokio::test]
async fn a_tiny_call_budget_caps_cloudflare_calls_and_fails_open() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| c.throttle.kv_call_budget = 2).await;
    // Listings take at most half of the fleet's budget: one call per window here, so
    // one listing; the other call is the exhaustion's read, and its write is refused.
    wait_for_lists(&kv, 1).await;

    exhausted_account_is_still_admitted(&app).await;
    assert_eq!(kv.calls().len(), 2, "{:?}", kv.calls());
    assert!(kv.keys().is_empty());
}

#[tokio::test]
async fn a_view_left_stale_by_failing_refreshes_drops_its_markers() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| c.throttle.max_staleness_ms = 1_000).await;
    let customer = app.signup().await;
    let account = customer.account_id;
    use_up_free_calls(&app, &customer).await;
    wait_until_marked(&app, &kv, account).await;
    assert_bucket_rule(
        account,
        &calls(&app, &customer.api_key, 100, IN_FLIGHT).await,
    );

    kv.set_fault(Fault::ServerError);
    let failed_open = eventually(WAIT, || async {
        calls(&app, &customer.api_key, 20, 4)
            .await
            .iter()
            .all(|o| o.status == StatusCode::OK)
    })
    .await;
    assert!(failed_open, "the stale view kept throttling");
    assert_all_admitted(&calls(&app, &customer.api_key, 200, IN_FLIGHT).await);
    assert!(app.state.throttler.stats().fail_open > 0);

    // Refreshes work again: the marker, still in KV, is honoured again.
    kv.set_fault(Fault::None);
    let throttling = eventually(WAIT, || async {
        calls(&app, &customer.api_key, 20, 4)
            .await
            .iter()
            .any(|o| o.status == StatusCode::TOO_MANY_REQUESTS)
    })
    .await;
    assert!(throttling, "the refreshed view never throttled again");
    assert_bucket_rule(
        account,
        &calls(&app, &customer.api_key, 200, IN_FLIGHT).await,
    );
}
