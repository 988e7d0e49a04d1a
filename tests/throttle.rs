//! Soft throttling end to end (issue 4; SPEC §3.1 step 3, §3.3 reconcile, §5): the
//! admission hash as customers see it, exhaustion markers in a local Cloudflare KV
//! server, the marker view's refresh, every fail-open path, two replicas over one
//! database and one KV namespace, and reconciliation.
//!
//! The admission bucket is computed here from the SPEC's formula with `sha2`, never
//! with the crate's own code, so a drift in either shows up.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, TimeZone, Utc};
use common::*;
use futures_util::stream::{self, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tollgate::config::Config;
use tollgate::month::Month;
use tollgate_testkit::fake_kv::{FakeKv, Fault, RecordedCall};

/// The free grant of the test apps: small, so an account is used up in a few calls.
const FREE_CALLS: i64 = 5;
/// The default `throttle.admission_percent`.
const ADMISSION_PERCENT: u32 = 20;
const REFRESH_MS: u64 = 200;
const PATH: &str = "/vedic/v1/horoscope/daily";
const IN_FLIGHT: usize = 32;
const WAIT: Duration = Duration::from_secs(10);

/// SPEC §5: SHA-256 of `v1:<account>:<uuid>`, first 4 bytes big-endian, mod 100.
fn bucket(account_id: i64, request_id: &str) -> u32 {
    let digest = Sha256::digest(format!("v1:{account_id}:{request_id}").as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % 100
}

/// Start and end (exclusive) of the current UTC month, in unix seconds.
fn current_month_bounds() -> (i64, i64) {
    let now = Utc::now();
    let start = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .unwrap();
    let (year, month) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    let end = Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0).unwrap();
    (start.timestamp(), end.timestamp())
}

/// The SPEC's marker key of an account in the current month.
fn marker_key(account_id: i64) -> String {
    format!("usage-exhausted:{account_id}:{}", current_month_bounds().0)
}

fn throttled_body() -> Value {
    json!({"code": "REQUEST_THROTTLED", "message": "Request throttled. Please try again."})
}

/// What a customer sees of one proxied call.
#[derive(Debug)]
struct Outcome {
    status: StatusCode,
    request_id: String,
    /// The JSON body of a gateway refusal (429).
    body: Option<Value>,
}

async fn call_once(app: &TestApp, api_key: &str) -> Outcome {
    let res = app.call(PATH, api_key).await;
    let status = res.status();
    let request_id = res
        .headers()
        .get("x-request-id")
        .expect("every proxied response carries X-Request-Id")
        .to_str()
        .unwrap()
        .to_owned();
    let body = if status == StatusCode::TOO_MANY_REQUESTS {
        Some(res.json().await.expect("a 429 has a JSON body"))
    } else {
        res.bytes().await.expect("body is readable");
        None
    };
    let parsed = uuid::Uuid::parse_str(&request_id).expect("X-Request-Id is a UUID");
    assert_eq!(parsed.get_version_num(), 4, "{request_id}");
    assert_eq!(
        request_id,
        parsed.hyphenated().to_string(),
        "lowercase, hyphenated"
    );
    Outcome {
        status,
        request_id,
        body,
    }
}

/// `n` calls with `in_flight` of them outstanding at any time.
async fn calls(app: &TestApp, api_key: &str, n: usize, in_flight: usize) -> Vec<Outcome> {
    stream::iter(0..n)
        .map(|_| call_once(app, api_key))
        .buffer_unordered(in_flight)
        .collect()
        .await
}

/// Asserts each call of a marked account was admitted exactly when its bucket is below
/// the admission percentage, with the SPEC's 429 otherwise. Returns the admitted ids.
fn assert_bucket_rule(account_id: i64, outcomes: &[Outcome]) -> HashSet<String> {
    let mut admitted = HashSet::new();
    for o in outcomes {
        let b = bucket(account_id, &o.request_id);
        if b < ADMISSION_PERCENT {
            assert_eq!(o.status, StatusCode::OK, "bucket {b} of {}", o.request_id);
            admitted.insert(o.request_id.clone());
        } else {
            assert_eq!(
                o.status,
                StatusCode::TOO_MANY_REQUESTS,
                "bucket {b} of {}",
                o.request_id
            );
            assert_eq!(o.body.as_ref(), Some(&throttled_body()));
        }
    }
    admitted
}

fn assert_all_admitted(outcomes: &[Outcome]) {
    for o in outcomes {
        assert_eq!(o.status, StatusCode::OK, "call {} refused", o.request_id);
    }
}

/// A gateway using `kv` for markers, with a free grant of `FREE_CALLS`.
async fn kv_app(kv: &FakeKv, adjust: impl FnOnce(&mut Config)) -> TestApp {
    spawn_app_with(|config| {
        use_kv(config, kv);
        config.usage.free_monthly_calls = FREE_CALLS;
        config.throttle.refresh_interval_ms = REFRESH_MS;
        adjust(config);
    })
    .await
}

/// Uses up a customer's free grant and checks PostgreSQL agrees it is exhausted.
async fn use_up_free_calls(app: &TestApp, customer: &Customer) {
    let outcomes = calls(app, &customer.api_key, FREE_CALLS as usize, 1).await;
    assert_all_admitted(&outcomes);
    app.wait_for_ledger(customer.account_id, FREE_CALLS).await;
    let usage = app.usage_of(customer.account_id).await;
    assert_eq!(usage["remaining"], 0);
    assert_eq!(usage["exhausted"], true);
}

/// Waits until the account's marker is in KV and in this replica's view.
async fn wait_until_marked(app: &TestApp, kv: &FakeKv, account_id: i64) {
    let key = &marker_key(account_id);
    let marked = eventually(WAIT, || async move {
        kv.value(key).is_some() && app.state.throttler.is_marked(account_id, Utc::now())
    })
    .await;
    assert!(marked, "marker {key} never written and seen");
}

/// Waits until this replica's view holds the account's marker (after a refresh).
async fn wait_until_seen(app: &TestApp, account_id: i64) {
    let seen = eventually(WAIT, || async move {
        app.state.throttler.is_marked(account_id, Utc::now())
    })
    .await;
    assert!(seen, "marker of {account_id} never seen by the replica");
}

fn is_list(call: &RecordedCall) -> bool {
    call.method == "GET" && call.path == "/keys"
}

fn count(calls: &[RecordedCall], method: &str, path: &str) -> usize {
    calls
        .iter()
        .filter(|c| c.method == method && c.path == path)
        .count()
}

/// Waits until the gateway has listed KV `n` times. The worker lists one at a time, so
/// when the second listing arrives the first one has completed.
async fn wait_for_lists(kv: &FakeKv, n: usize) {
    let listed = eventually(WAIT, || async move {
        kv.calls().iter().filter(|c| is_list(c)).count() >= n
    })
    .await;
    assert!(listed, "the gateway never listed the markers {n} times");
}

/// Waits until a listing that started after this call has completed, so the view
/// reflects what KV holds now.
async fn wait_for_a_fresh_refresh(kv: &FakeKv) {
    let listed = kv.calls().iter().filter(|c| is_list(c)).count();
    wait_for_lists(kv, listed + 2).await;
}

async fn wait_for_kv_call(kv: &FakeKv, method: &str, path: &str) {
    let seen = eventually(WAIT, || async move { count(&kv.calls(), method, path) > 0 }).await;
    assert!(seen, "the gateway never sent {method} {path}");
}

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

fn upstream_ids(app: &TestApp) -> Vec<String> {
    app.upstream
        .recorded()
        .iter()
        .map(|r| r.headers["x-request-id"].to_str().unwrap().to_owned())
        .collect()
}

async fn reconcile(app: &TestApp) -> (StatusCode, Value) {
    let res = app.admin_post("/admin/v1/reconcile", &json!({})).await;
    (res.status(), res.json().await.unwrap())
}

async fn upgrade(app: &TestApp, account_id: i64, allowance: i64) {
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{account_id}/subscriptions"),
            &json!({"plan": "pro", "monthly_allowance": allowance}),
        )
        .await;
    assert_eq!(res.status(), 201, "subscription activated");
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
    assert!(removed, "marker still present after the upgrade");
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
    assert!(
        app.state.throttler.stats().fail_open > 0,
        "the failure was not counted"
    );
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
    wait_for_lists(&kv, 2).await;

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

#[tokio::test]
async fn reconciliation_writes_missing_markers_and_removes_stale_ones() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |_| {}).await;
    let short = app.signup().await;
    let upgraded = app.signup().await;
    let short_key = marker_key(short.account_id);
    let upgraded_key = marker_key(upgraded.account_id);

    // `upgraded` is marked; then Cloudflare fails while `short` runs out and while
    // `upgraded` gets a larger allowance, so neither change reaches KV.
    use_up_free_calls(&app, &upgraded).await;
    wait_until_marked(&app, &kv, upgraded.account_id).await;
    kv.set_fault(Fault::ServerError);
    use_up_free_calls(&app, &short).await;
    wait_for_kv_call(&kv, "GET", &format!("/values/{short_key}")).await;
    upgrade(&app, upgraded.account_id, 1_000).await;
    wait_for_kv_call(&kv, "DELETE", &format!("/values/{upgraded_key}")).await;

    let (status, body) = reconcile(&app).await;
    assert_eq!(status, 503, "reconciliation needs KV: {body}");
    assert_eq!(body["code"], "SERVICE_UNAVAILABLE");

    kv.set_fault(Fault::None);
    assert_eq!(kv.keys(), vec![upgraded_key.clone()]);
    let (status, body) = reconcile(&app).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"accounts_checked": 2, "markers_written": 1, "markers_removed": 1})
    );
    assert_eq!(kv.keys(), vec![short_key.clone()]);
    let (_, month_end) = current_month_bounds();
    assert_eq!(
        kv.value(&short_key),
        Some(("1".to_owned(), Some(month_end)))
    );

    // What customers see follows.
    wait_for_a_fresh_refresh(&kv).await;
    assert!(app.state.throttler.is_marked(short.account_id, Utc::now()));
    assert!(
        !app.state
            .throttler
            .is_marked(upgraded.account_id, Utc::now())
    );
    assert_bucket_rule(
        short.account_id,
        &calls(&app, &short.api_key, 200, IN_FLIGHT).await,
    );
    assert_all_admitted(&calls(&app, &upgraded.api_key, 100, IN_FLIGHT).await);

    // A second run finds nothing to do.
    let (status, body) = reconcile(&app).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"accounts_checked": 2, "markers_written": 0, "markers_removed": 0})
    );
}

/// Creates `n` accounts directly in PostgreSQL (signup's password hashing is slow).
async fn insert_accounts(app: &TestApp, n: i64) -> Vec<i64> {
    sqlx::query_scalar(
        "INSERT INTO account (email, password_hash)
         SELECT 'bulk-' || g || '-' || $2 || '@example.com', 'not-a-password-hash'
         FROM generate_series(1, $1) AS g
         RETURNING id",
    )
    .bind(n)
    .bind(uuid::Uuid::new_v4().simple().to_string())
    .fetch_all(&app.db.pool)
    .await
    .unwrap()
}

/// Every call the KV server received, as (method, path).
fn methods_and_paths(kv: &FakeKv) -> Vec<(String, String)> {
    kv.calls().into_iter().map(|c| (c.method, c.path)).collect()
}

/// One completed call for each account, now.
fn one_call_each(accounts: &[i64]) -> Vec<tollgate::usage::UsageEvent> {
    accounts
        .iter()
        .map(|&account_id| tollgate::usage::UsageEvent {
            transaction_id: uuid::Uuid::new_v4(),
            account_id,
            key_id: 0,
            occurred_at: Utc::now(),
            method: axum::http::Method::GET,
            route: PATH.into(),
            upstream_status: 200,
            cost: 1,
            reserved_by: None,
        })
        .collect()
}

#[tokio::test]
async fn reconciling_many_accounts_uses_the_bulk_endpoints() {
    let kv = FakeKv::start().await;
    // No periodic listing, so every KV call below is the reconciliation's.
    let app = kv_app(&kv, |c| {
        c.usage.free_monthly_calls = 1;
        c.throttle.refresh_interval_ms = 600_000;
    })
    .await;
    wait_for_lists(&kv, 1).await;
    let accounts = insert_accounts(&app, 50).await;

    // Fifty accounts use up their one call while Cloudflare fails.
    kv.set_fault(Fault::ServerError);
    let events = one_call_each(&accounts);
    let accountant = app.accountant.as_ref().expect("metering is on");
    let outcome = accountant.account(&events, Utc::now()).await.unwrap();
    assert_eq!(outcome.exhausted.len(), 50);
    let attempted = eventually(WAIT, || async { app.state.throttler.stats().fail_open > 0 }).await;
    assert!(attempted, "the throttler never tried the 50 writes");
    assert!(kv.keys().is_empty());

    kv.set_fault(Fault::None);
    kv.clear_calls();
    let (status, body) = reconcile(&app).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"accounts_checked": 50, "markers_written": 50, "markers_removed": 0})
    );
    let seen = methods_and_paths(&kv);
    assert_eq!(
        seen,
        [
            ("GET".into(), "/keys".into()),
            ("PUT".into(), "/bulk".into())
        ]
    );
    let (_, month_end) = current_month_bounds();
    for &account in &accounts {
        assert_eq!(
            kv.value(&marker_key(account)),
            Some(("1".to_owned(), Some(month_end)))
        );
    }

    // All fifty get a larger allowance while Cloudflare fails, then are reconciled.
    kv.set_fault(Fault::ServerError);
    for &account in &accounts {
        upgrade(&app, account, 100).await;
    }
    let attempted = eventually(WAIT, || async {
        kv.calls().iter().filter(|c| c.method == "DELETE").count() == 50
    })
    .await;
    assert!(attempted, "the throttler never tried the 50 deletes");
    kv.set_fault(Fault::None);
    assert_eq!(kv.keys().len(), 50);
    kv.clear_calls();
    let (status, body) = reconcile(&app).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"accounts_checked": 50, "markers_written": 0, "markers_removed": 50})
    );
    let seen = methods_and_paths(&kv);
    assert_eq!(
        seen,
        [
            ("GET".into(), "/keys".into()),
            ("POST".into(), "/bulk/delete".into())
        ]
    );
    assert!(kv.keys().is_empty());
}

#[tokio::test]
async fn a_burst_of_exhaustions_costs_one_listing_and_one_bulk_write() {
    let kv = FakeKv::start().await;
    let app = kv_app(&kv, |c| {
        c.usage.free_monthly_calls = 1;
        c.throttle.refresh_interval_ms = 600_000;
    })
    .await;
    wait_for_lists(&kv, 1).await;
    let accounts = insert_accounts(&app, 40).await;
    kv.clear_calls();
    let events = one_call_each(&accounts);
    let accountant = app.accountant.as_ref().expect("metering is on");
    let outcome = accountant.account(&events, Utc::now()).await.unwrap();
    assert_eq!(outcome.exhausted.len(), 40);
    let written = eventually(WAIT, || async { kv.keys().len() == 40 }).await;
    assert!(written, "markers not written");
    let seen = methods_and_paths(&kv);
    assert_eq!(
        seen,
        [
            ("GET".into(), "/keys".into()),
            ("PUT".into(), "/bulk".into())
        ]
    );
    // The view learns of the write once the worker has its answer: poll, don't race.
    let marked = eventually(WAIT, || async {
        accounts
            .iter()
            .all(|&account| app.state.throttler.is_marked(account, Utc::now()))
    })
    .await;
    assert!(
        marked,
        "the replica's view does not hold every written marker"
    );
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

    calls(&app, &customer.api_key, 20, 4).await;
    let healed = eventually(WAIT, || async { kv.value(&marker_key(account)).is_none() }).await;
    assert!(healed, "the stray marker is still in KV");
    assert!(!app.state.throttler.is_marked(account, Utc::now()));
    assert_all_admitted(&calls(&app, &customer.api_key, 100, IN_FLIGHT).await);
}
