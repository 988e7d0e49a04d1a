//! Soft throttling end to end (issue 4; SPEC §3.1 step 3, §3.3 reconcile, §5, §8): the
//! admission hash as customers see it, exhaustion markers in a local Cloudflare KV
//! server, the marker view's refresh, every fail-open path, replicas over one database
//! and one KV namespace (one fleet budget, one lister, markers shared through
//! PostgreSQL, exhaustions racing upgrades), and reconciliation.
//!
//! The admission bucket is computed here from the SPEC's formula with `sha2`, never
//! with the crate's own code, so a drift in either shows up.

mod admission;
mod budget;
mod faults;
mod fleet;
mod markers;
mod races;
mod reconcile;
mod replicas;

use std::collections::HashSet;
use std::time::Duration;

use chrono::{Datelike, TimeZone, Utc};
use futures_util::stream::{self, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tollgate::config::Config;
use tollgate_testkit::fake_kv::{FakeKv, RecordedCall};

use crate::common::*;

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

/// Another replica of `first`'s fleet (same database, upstream and KV), configured as
/// `kv_app` does, then by `adjust`.
async fn replica_of(first: &TestApp, kv: &FakeKv, adjust: impl FnOnce(&mut Config)) -> TestApp {
    let mut config = test_config(&first.db, &first.upstream);
    use_kv(&mut config, kv);
    config.usage.free_monthly_calls = FREE_CALLS;
    config.throttle.refresh_interval_ms = REFRESH_MS;
    adjust(&mut config);
    spawn_replica(first.db.clone(), first.upstream.clone(), config).await
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

/// Makes PostgreSQL say the account has used `used` units this month, as another
/// replica's accounting would have.
async fn set_used(app: &TestApp, account_id: i64, used: i64) {
    set_used_in(&app.db.pool, account_id, used).await;
}

/// [`set_used`] through `db`, e.g. inside a transaction that holds the account.
async fn set_used_in<'e>(db: impl sqlx::PgExecutor<'e>, account_id: i64, used: i64) {
    sqlx::query(
        "INSERT INTO usage_counter (account_id, month_start, used)
         VALUES ($1, date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', $2)
         ON CONFLICT (account_id, month_start) DO UPDATE SET used = EXCLUDED.used",
    )
    .bind(account_id)
    .bind(used)
    .execute(db)
    .await
    .unwrap();
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

async fn wait_for_kv_call(kv: &FakeKv, method: &str, path: &str) {
    let seen = eventually(WAIT, || async move { count(&kv.calls(), method, path) > 0 }).await;
    assert!(seen, "the gateway never sent {method} {path}");
}

fn upstream_ids(app: &TestApp) -> Vec<String> {
    app.upstream
        .recorded()
        .iter()
        .map(|r| r.headers["x-request-id"].to_str().unwrap().to_owned())
        .collect()
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
