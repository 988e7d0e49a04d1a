//! Admission as customers see it: an exhausted account's calls are admitted exactly
//! when their bucket is below the admission percentage; accounts with calls left never
//! are throttled.

use std::collections::HashSet;
use std::time::Instant;

use chrono::Utc;
use tollgate::month::Month;
use tollgate_testkit::fake_kv::FakeKv;

use super::*;

async fn ledger_ids(app: &TestApp, account_id: i64) -> HashSet<String> {
    let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT transaction_id FROM subscription_tracking WHERE account_id = $1",
    )
    .bind(account_id)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    ids.into_iter()
        .map(|id| id.hyphenated().to_string())
        .collect()
}

#[test]
fn the_tests_own_bucket_rule_matches_the_specs_example() {
    assert_eq!(bucket(42, "00000000-0000-4000-8000-000000000000"), 75);
}

#[tokio::test]
async fn an_exhausted_account_is_admitted_exactly_when_its_bucket_is_below_twenty() {
    let kv = FakeKv::start().await;
    let started = Instant::now();
    let app = kv_app(&kv, |_| {}).await;
    let customer = app.signup().await;
    let account = customer.account_id;
    use_up_free_calls(&app, &customer).await;
    wait_until_marked(&app, &kv, account).await;
    let before_burst = ledger_ids(&app, account).await;
    assert_eq!(upstream_ids(&app).len(), FREE_CALLS as usize);

    let burst_started = Instant::now();
    let kv_calls_before = kv.calls().len();
    let outcomes = calls(&app, &customer.api_key, 10_000, IN_FLIGHT).await;
    let burst = burst_started.elapsed();
    let kv_calls = kv.calls();
    let since_start = started.elapsed();

    let admitted = assert_bucket_rule(account, &outcomes);
    let distinct: HashSet<&str> = outcomes.iter().map(|o| o.request_id.as_str()).collect();
    assert_eq!(distinct.len(), 10_000, "every call has its own request id");
    assert!(
        (1_700..=2_300).contains(&admitted.len()),
        "{} of 10,000 admitted, expected about 20%",
        admitted.len()
    );

    // Throttled calls never reach the upstream and publish no usage event.
    let upstream: HashSet<String> = upstream_ids(&app).into_iter().collect();
    let expected: HashSet<String> = before_burst.union(&admitted).cloned().collect();
    assert_eq!(
        upstream, expected,
        "the upstream saw exactly the admitted calls"
    );
    app.wait_for_ledger(account, FREE_CALLS + admitted.len() as i64)
        .await;
    assert_eq!(ledger_ids(&app, account).await, expected);
    let usage = app.usage_of(account).await;
    assert_eq!(usage["used"], FREE_CALLS + admitted.len() as i64);

    // Cloudflare saw only the refresh schedule and the one marker write.
    let lists = kv_calls.iter().filter(|c| is_list(c)).count();
    let schedule = since_start.as_millis() as usize / REFRESH_MS as usize + 2;
    assert!(lists <= schedule, "{lists} listings in {since_start:?}");
    let key = format!("/values/{}", marker_key(account));
    assert_eq!(count(&kv_calls, "GET", &key), 1, "one read before writing");
    assert_eq!(count(&kv_calls, "PUT", &key), 1, "one marker write");
    assert_eq!(kv_calls.len(), lists + 2, "nothing else: {kv_calls:?}");
    let during_burst = &kv_calls[kv_calls_before..];
    assert!(during_burst.iter().all(is_list), "{during_burst:?}");
    let burst_schedule = burst.as_millis() as usize / REFRESH_MS as usize + 2;
    assert!(
        during_burst.len() <= burst_schedule,
        "{} listings during a {burst:?} burst",
        during_burst.len()
    );
    println!(
        "burst of 10,000 calls: {burst:?}, {} admitted; KV calls during it: {} (all listings); \
         since start ({since_start:?}): {} listings, 1 GET, 1 PUT",
        admitted.len(),
        during_burst.len(),
        lists
    );
}

#[tokio::test]
async fn an_account_with_calls_left_is_never_throttled() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| c.usage.free_monthly_calls = 1_000).await;
    let customer = app.signup().await;
    let other = app.signup().await;
    let (start, end) = current_month_bounds();
    // Another account's marker, and this account's marker of last month, are no reason
    // to throttle this account now.
    kv.insert(&marker_key(other.account_id), "1", Some(end));
    let last_month = Month::containing(Utc::now() - chrono::Duration::days(40)).start_unix();
    assert!(last_month < start);
    kv.insert(
        &format!("usage-exhausted:{}:{last_month}", customer.account_id),
        "1",
        Some(end),
    );
    wait_until_seen(&app, other.account_id).await;
    assert!(
        !app.state
            .throttler
            .is_marked(customer.account_id, Utc::now())
    );

    let outcomes = calls(&app, &customer.api_key, 500, IN_FLIGHT).await;
    assert_all_admitted(&outcomes);
    app.wait_for_ledger(customer.account_id, 500).await;
    assert_eq!(app.usage_of(customer.account_id).await["remaining"], 500);
}
