//! Monthly usage accounting (SPEC §3.2–§3.4 and §4, issue 3), one test per rule.
//!
//! Rules that hinge on time run through the library with explicit instants
//! (`Accountant::account`, `usage_report`, `activate`) against real PostgreSQL; the
//! rest goes through the real gateway on port 0. Every test has its own database.
//! Usage objects are compared as one line, e.g. `"pro: 3000 of 10000 used, 7000 left"`.

mod common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use secrecy::SecretString;
use serde_json::{Value, json};
use sqlx::{PgPool, Postgres};
use tokio_util::sync::CancellationToken;
use tollgate::month::Month;
use tollgate::throttle::Throttler;
use tollgate::usage::grants::create_free_subscription;
use tollgate::usage::report::usage_report;
use tollgate::usage::subscriptions::{NewSubscription, activate};
use tollgate::usage::{Accountant, BatchOutcome, Locks, UsageEvent, UsageReport};
use uuid::Uuid;

const FREE: i64 = 3000;
const PRO: (&str, i64) = ("pro", 10_000);
const DAILY: &str = "/vedic/v1/horoscope/daily";
/// Every month, for [`snapshots`].
const ALL: &str = "%";

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("an RFC 3339 instant")
}

fn month(s: &str) -> Month {
    s.parse().expect("a YYYY-MM month")
}

/// A completed call of `account_id` at `occurred_at`, with a fresh transaction id.
fn event(account_id: i64, occurred_at: DateTime<Utc>) -> UsageEvent {
    UsageEvent {
        transaction_id: Uuid::new_v4(),
        account_id,
        key_id: 1,
        occurred_at,
        method: axum::http::Method::GET,
        route: DAILY.into(),
        upstream_status: 200,
    }
}

fn events(account_id: i64, occurred_at: DateTime<Utc>, n: i64) -> Vec<UsageEvent> {
    (0..n).map(|_| event(account_id, occurred_at)).collect()
}

/// An accountant that waits for row locks as long as a test holds them.
fn accountant(pool: &PgPool) -> Accountant {
    Accountant::new(pool.clone(), FREE, true, Throttler::disabled())
        .with_lock_timeout(Duration::from_secs(60))
}

/// Accounts one batch as the listener would, with `now` as the clock.
async fn account(pool: &PgPool, events: &[UsageEvent], now: DateTime<Utc>) -> BatchOutcome {
    let outcome = accountant(pool).account(events, now).await;
    outcome.expect("batch accounted")
}

/// An account row created at `created_at` with no subscription and no grant, as
/// accounts older than subscription tracking are.
async fn legacy_account(pool: &PgPool, created_at: &str) -> i64 {
    let email = format!("{}@example.com", Uuid::new_v4().simple());
    let sql = "INSERT INTO account (email, password_hash, created_at)
               VALUES ($1, 'x', $2) RETURNING id";
    let query = sqlx::query_scalar(sql).bind(email).bind(at(created_at));
    query.fetch_one(pool).await.unwrap()
}

/// An account signed up at `signup` (free subscription and that month's free grant);
/// returns the account and free subscription ids.
async fn customer_since(pool: &PgPool, signup: &str) -> (i64, i64) {
    let id = legacy_account(pool, signup).await;
    let mut conn = pool.acquire().await.unwrap();
    let free = create_free_subscription(&mut conn, id, at(signup), FREE, true).await;
    (id, free.unwrap().id)
}

/// Activates a paid subscription valid over `[starts, expires)` at `now`; returns its id.
async fn subscribe(
    pool: &PgPool,
    account_id: i64,
    (plan, monthly_allowance): (&str, i64),
    (starts, expires): (&str, Option<&str>),
    now: &str,
) -> i64 {
    let new = NewSubscription {
        plan: plan.into(),
        monthly_allowance,
        starts_at: at(starts),
        expires_at: expires.map(at),
    };
    let activated = activate(
        pool,
        &Throttler::disabled(),
        account_id,
        &new,
        at(now),
        FREE,
        true,
    )
    .await;
    activated.unwrap().subscription.id
}

async fn report(pool: &PgPool, account_id: i64, m: &str, now: DateTime<Utc>) -> UsageReport {
    let mut conn = pool.acquire().await.unwrap();
    let found = usage_report(&mut conn, account_id, month(m), now, FREE).await;
    found.unwrap().expect("the account exists")
}

fn describe(plan: &str, allowance: i64, used: i64, remaining: i64, exhausted: bool) -> String {
    let flag = if exhausted { ", exhausted" } else { "" };
    format!("{plan}: {used} of {allowance} used, {remaining} left{flag}")
}

/// The usage object of month `m` as judged at `now`, described in one line.
async fn usage(pool: &PgPool, account_id: i64, m: &str, now: DateTime<Utc>) -> String {
    let r = report(pool, account_id, m, now).await;
    describe(&r.plan, r.allowance, r.used, r.remaining, r.exhausted)
}

/// A usage object of the HTTP API, described in one line.
fn usage_json(v: &Value) -> String {
    let n = |k: &str| v[k].as_i64().unwrap_or_else(|| panic!("{k} in {v}"));
    let plan = v["plan"].as_str().expect("plan");
    let exhausted = v["exhausted"].as_bool().expect("exhausted");
    describe(plan, n("allowance"), n("used"), n("remaining"), exhausted)
}

/// One value selected by a query whose only parameter is an account id.
async fn scalar<T>(pool: &PgPool, sql: &str, account_id: i64) -> T
where
    T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres> + Send + Unpin,
{
    let query = sqlx::query_scalar(sql).bind(account_id);
    query.fetch_one(pool).await.unwrap()
}

/// The subscription a ledger row was charged to.
async fn charged_to(pool: &PgPool, e: &UsageEvent) -> Option<i64> {
    let sql = "SELECT subscription_id FROM subscription_tracking WHERE transaction_id = $1";
    let query = sqlx::query_scalar(sql).bind(e.transaction_id);
    query.fetch_one(pool).await.unwrap()
}

/// Quota snapshots `(subscription_id, month, allowance, is_free)` of the months
/// matching `m` (a `LIKE` pattern, [`ALL`] for every month), oldest first.
async fn snapshots(pool: &PgPool, account_id: i64, m: &str) -> Vec<Snap> {
    let sql = "SELECT subscription_id, to_char(month_start AT TIME ZONE 'UTC', 'YYYY-MM') AS m,
                      allowance, is_free
               FROM monthly_usage WHERE account_id = $1
                 AND to_char(month_start AT TIME ZONE 'UTC', 'YYYY-MM') LIKE $2
               ORDER BY month_start, subscription_id";
    let query = sqlx::query_as(sql).bind(account_id).bind(m);
    query.fetch_all(pool).await.unwrap()
}

type Snap = (i64, String, i64, bool);

fn snap(sub: i64, m: &str, allowance: i64, is_free: bool) -> Snap {
    (sub, m.to_owned(), allowance, is_free)
}

/// `usage_counter.used` and the ledger's row count for an account and month.
async fn counter_and_ledger(pool: &PgPool, account_id: i64, m: &str) -> (i64, i64) {
    let m = month(m);
    let sql = "SELECT coalesce((SELECT used FROM usage_counter
                                WHERE account_id = $1 AND month_start = $2), 0),
                      (SELECT count(*) FROM subscription_tracking
                       WHERE account_id = $1 AND occurred_at >= $2 AND occurred_at < $3)";
    let query = sqlx::query_as(sql).bind(account_id).bind(m.start());
    query.bind(m.end()).fetch_one(pool).await.unwrap()
}

/// Writes a month's counter directly, as history recorded earlier would be.
async fn set_counter(pool: &PgPool, account_id: i64, m: &str, used: i64) {
    let sql = "INSERT INTO usage_counter (account_id, month_start, used) VALUES ($1, $2, $3)";
    let query = sqlx::query(sql).bind(account_id).bind(month(m).start());
    query.bind(used).execute(pool).await.unwrap();
}

/// Holds the account's row lock (the one the listener takes) until the transaction ends.
async fn lock_account(pool: &PgPool, id: i64) -> sqlx::Transaction<'static, Postgres> {
    let mut tx = pool.begin().await.unwrap();
    let query = sqlx::query("SELECT id FROM account WHERE id = $1 FOR UPDATE").bind(id);
    query.execute(&mut *tx).await.unwrap();
    tx
}

async fn assert_error(res: reqwest::Response, status: u16, code: &str) {
    assert_eq!(res.status(), status, "expected {code}");
    let body: Value = res.json().await.expect("a JSON error body");
    assert_eq!(body["code"], code, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "{body}");
}

/// Polls `check` for up to ten seconds; fails the test with `what` if it never holds.
async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    assert!(eventually(Duration::from_secs(10), check).await, "{what}");
}

/// Stops the gateway (draining its queue), then checks nothing was accounted.
async fn assert_nothing_accounted(app: &mut TestApp, account_id: i64) {
    app.stop().await;
    assert_eq!(app.ledger_rows(account_id).await, 0);
    let now = Utc::now();
    let current = Month::containing(now).to_string();
    let used = report(&app.db.pool, account_id, &current, now).await.used;
    assert_eq!(used, 0);
}

fn local_mode(config: &mut tollgate::Config) {
    config.usage_check.enabled = false;
    config.throttle.enabled = false;
}

#[tokio::test]
async fn the_last_millisecond_of_a_month_counts_in_that_month() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-10-15T09:00:00Z").await;
    let last = at("2026-10-31T23:59:59.999Z");
    account(pool, &[event(id, last)], last).await;

    let october = usage(pool, id, "2026-10", last).await;
    assert_eq!(october, "free: 1 of 3000 used, 2999 left");
    assert_eq!(report(pool, id, "2026-11", last).await.used, 0);
    assert_eq!(counter_and_ledger(pool, id, "2026-10").await, (1, 1));
    let grants = snapshots(pool, id, ALL).await;
    assert_eq!(grants, [snap(free, "2026-10", FREE, true)]);
}

#[tokio::test]
async fn the_first_millisecond_of_a_month_counts_in_it_and_grants_its_free_calls_lazily() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-10-15T09:00:00Z").await;
    let last = at("2026-10-31T23:59:59.999Z");
    let first = at("2026-11-01T00:00:00.000Z");
    account(pool, &[event(id, last)], last).await;
    account(pool, &[event(id, first)], first).await;

    // No carry-forward: November starts from its own grant.
    let november = usage(pool, id, "2026-11", first).await;
    assert_eq!(november, "free: 1 of 3000 used, 2999 left");
    assert_eq!(report(pool, id, "2026-10", first).await.used, 1);
    assert_eq!(counter_and_ledger(pool, id, "2026-11").await, (1, 1));
    let grants = snapshots(pool, id, ALL).await;
    let (october, november) = (
        snap(free, "2026-10", FREE, true),
        snap(free, "2026-11", FREE, true),
    );
    assert_eq!(grants, [october, november]);
}

#[tokio::test]
async fn a_subscription_counts_from_its_start_instant_inclusive() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let start = "2026-11-10T00:00:00Z";
    let pro = subscribe(pool, id, PRO, (start, None), "2026-11-05T00:00:00Z").await;
    let before = event(id, at("2026-11-09T23:59:59.999Z"));
    let from = event(id, at(start));
    account(pool, &[before.clone(), from.clone()], at(start)).await;

    assert_eq!(charged_to(pool, &before).await, Some(free));
    assert_eq!(charged_to(pool, &from).await, Some(pro));
    let just_before = usage(pool, id, "2026-11", before.occurred_at).await;
    assert_eq!(just_before, "free: 2 of 3000 used, 2998 left");
    let from_start = usage(pool, id, "2026-11", at(start)).await;
    assert_eq!(from_start, "pro: 2 of 10000 used, 9998 left");
}

#[tokio::test]
async fn a_subscription_stops_at_its_expiry_instant_exclusive() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (start, expiry) = ("2026-11-10T00:00:00Z", "2026-12-10T00:00:00Z");
    let pro = subscribe(pool, id, PRO, (start, Some(expiry)), start).await;
    let last = event(id, at("2026-12-09T23:59:59.999Z"));
    let gone = event(id, at(expiry));
    account(pool, &[last.clone(), gone.clone()], at(expiry)).await;

    assert_eq!(charged_to(pool, &last).await, Some(pro));
    assert_eq!(charged_to(pool, &gone).await, Some(free));
    let still = usage(pool, id, "2026-12", last.occurred_at).await;
    assert_eq!(still, "pro: 2 of 10000 used, 9998 left");
    let expired = usage(pool, id, "2026-12", at(expiry)).await;
    assert_eq!(expired, "free: 2 of 3000 used, 2998 left");
}

#[tokio::test]
async fn subscriptions_starting_at_the_same_instant_go_to_the_newest() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let start = "2026-11-10T00:00:00Z";
    let older = subscribe(pool, id, ("max", 90_000), (start, None), start).await;
    let newer = subscribe(pool, id, ("basic", 5_000), (start, None), start).await;
    assert!(newer > older);
    let now = at("2026-11-20T12:00:00Z");
    let call = event(id, now);
    account(pool, std::slice::from_ref(&call), now).await;

    assert_eq!(charged_to(pool, &call).await, Some(newer));
    let november = usage(pool, id, "2026-11", now).await;
    assert_eq!(november, "basic: 1 of 5000 used, 4999 left");
}

#[tokio::test]
async fn an_expired_subscription_falls_back_to_the_free_grant() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-09-20T08:00:00Z").await;
    let (start, expiry) = ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z");
    subscribe(pool, id, PRO, (start, Some(expiry)), start).await;
    let now = at("2026-12-15T12:00:00Z");
    let unused = usage(pool, id, "2026-12", now).await;
    assert_eq!(unused, "free: 0 of 3000 used, 3000 left");

    let call = event(id, now);
    account(pool, std::slice::from_ref(&call), now).await;
    assert_eq!(charged_to(pool, &call).await, Some(free));
    let december = usage(pool, id, "2026-12", now).await;
    assert_eq!(december, "free: 1 of 3000 used, 2999 left");
    let grants = snapshots(pool, id, "2026-12").await;
    assert_eq!(grants, [snap(free, "2026-12", FREE, true)]);
}

#[tokio::test]
async fn an_upgrade_mid_month_keeps_the_calls_already_used() {
    let app = spawn_app().await;
    let id = app.signup().await.account_id;
    let now = Utc::now();
    let listener = app.accountant.clone().expect("metering on");
    let outcome = listener.account(&events(id, now, FREE), now).await.unwrap();
    assert_eq!(outcome.exhausted, [id]);
    let used_up = usage_json(&app.usage_of(id).await);
    assert_eq!(used_up, "free: 3000 of 3000 used, 0 left, exhausted");
    let throttler = &app.state.throttler;
    let marked = || std::future::ready(throttler.is_marked(id, Utc::now()));
    wait_until("exhaustion marker written", marked).await;

    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    let body = json!({"plan": "pro", "monthly_allowance": 10_000});
    let res = app.admin_post(&path, &body).await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    assert!(created["subscription_id"].is_i64(), "{created}");
    assert_eq!(
        (created["plan"].as_str(), created["account_id"].as_i64()),
        (Some("pro"), Some(id))
    );
    let upgraded = usage_json(&app.usage_of(id).await);
    assert_eq!(upgraded, "pro: 3000 of 10000 used, 7000 left");
    assert!(!throttler.is_marked(id, Utc::now()), "marker removed");
}

#[tokio::test]
async fn a_new_month_is_granted_lazily_to_accounts_created_before_tracking() {
    // One account predates the subscription migrations (V3 gives it a free
    // subscription but no grant); the other has no subscription row at all.
    let db = TestDb::migrated_to(Some(2)).await;
    let pool = &db.pool;
    let before_v3 = legacy_account(pool, "2020-01-15T00:00:00Z").await;
    let url = SecretString::from(db.url.clone());
    tollgate::db::migrate_to(&url, None).await.unwrap();
    let bare = legacy_account(pool, "2021-06-01T00:00:00Z").await;
    assert!(snapshots(pool, before_v3, ALL).await.is_empty());

    let now = at("2026-11-15T12:00:00Z");
    account(pool, &[event(before_v3, now), event(bare, now)], now).await;
    let sql = "SELECT array_agg(id) FROM subscription WHERE account_id = $1 AND plan = 'free'";
    for id in [before_v3, bare] {
        let free: Vec<i64> = scalar(pool, sql, id).await;
        assert_eq!(free.len(), 1, "one free subscription");
        let grants = snapshots(pool, id, ALL).await;
        assert_eq!(grants, [snap(free[0], "2026-11", FREE, true)]);
        let november = usage(pool, id, "2026-11", now).await;
        assert_eq!(november, "free: 1 of 3000 used, 2999 left");
    }
}

#[tokio::test]
async fn a_paid_subscription_gets_its_second_month_snapshot_lazily() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, free) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (start, expiry) = ("2026-11-15T00:00:00Z", "2027-01-15T00:00:00Z");
    let pro = subscribe(pool, id, PRO, (start, Some(expiry)), start).await;
    let paid = snap(pro, "2026-11", 10_000, false);
    let grants = snapshots(pool, id, ALL).await;
    assert_eq!(grants, [snap(free, "2026-11", FREE, true), paid]);

    let now = at("2026-12-03T10:00:00Z");
    let call = event(id, now);
    account(pool, std::slice::from_ref(&call), now).await;
    let paid = snap(pro, "2026-12", 10_000, false);
    let grants = snapshots(pool, id, "2026-12").await;
    assert_eq!(grants, [snap(free, "2026-12", FREE, true), paid]);
    assert_eq!(charged_to(pool, &call).await, Some(pro));
    let december = usage(pool, id, "2026-12", now).await;
    assert_eq!(december, "pro: 1 of 10000 used, 9999 left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_free_grant_per_account_and_month_under_concurrent_first_events() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (a, b) = (accountant(pool), accountant(&db.second_pool().await));
    let (signed_up, _) = customer_since(pool, "2026-10-01T00:00:00Z").await;
    let legacy = legacy_account(pool, "2020-01-01T00:00:00Z").await;
    let mut m = month("2026-11");
    for _ in 0..8 {
        let now = m.start() + chrono::Duration::days(2);
        let first = [event(signed_up, now), event(legacy, now)];
        let second = [event(legacy, now), event(signed_up, now)];
        let (a, b) = (a.clone(), b.clone());
        let (x, y) = tokio::join!(
            tokio::spawn(async move { a.account(&first, now).await }),
            tokio::spawn(async move { b.account(&second, now).await }),
        );
        let (x, y) = (x.unwrap().unwrap(), y.unwrap().unwrap());
        assert_eq!(x.accounted + y.accounted, 4);
        m = m.next();
    }
    // Signup's October grant, then one per month from November to June.
    let sql = "SELECT array[count(*), count(DISTINCT month_start)]
               FROM monthly_usage WHERE account_id = $1 AND is_free";
    for (id, months) in [(signed_up, 9), (legacy, 8)] {
        let grants: Vec<i64> = scalar(pool, sql, id).await;
        assert_eq!(grants, [months, months], "account {id}");
        assert_eq!(counter_and_ledger(pool, id, "2027-03").await, (2, 2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_event_delivered_twice_and_concurrently_is_accounted_once() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (a, b) = (accountant(pool), accountant(&db.second_pool().await));
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let now = at("2026-11-20T12:00:00Z");
    let call = event(id, now);
    let (twice, once) = ([call.clone(), call.clone()], [call.clone()]);
    let (a2, b2) = (a.clone(), b.clone());
    let (x, y) = tokio::join!(
        tokio::spawn(async move { a2.account(&twice, now).await }),
        tokio::spawn(async move { b2.account(&once, now).await }),
    );
    let (x, y) = (x.unwrap().unwrap(), y.unwrap().unwrap());
    let again = a.account(std::slice::from_ref(&call), now).await.unwrap();

    assert_eq!(x.accounted + y.accounted + again.accounted, 1);
    assert_eq!(x.duplicates + y.duplicates + again.duplicates, 3);
    assert_eq!(counter_and_ledger(pool, id, "2026-11").await, (1, 1));
    let november = usage(pool, id, "2026-11", now).await;
    assert_eq!(november, "free: 1 of 3000 used, 2999 left");
}

#[tokio::test]
async fn a_used_up_past_month_gets_no_exhaustion_marker() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-10-01T08:00:00Z").await;
    let (october, now) = (at("2026-10-20T12:00:00Z"), at("2026-11-02T00:00:00Z"));
    let outcome = account(pool, &events(id, october, FREE), now).await;
    assert_eq!(outcome.accounted, FREE as usize);
    assert!(outcome.exhausted.is_empty(), "no marker for a past month");
    let used_up = usage(pool, id, "2026-10", now).await;
    assert_eq!(used_up, "free: 3000 of 3000 used, 0 left, exhausted");
    let current = usage(pool, id, "2026-11", now).await;
    assert_eq!(current, "free: 0 of 3000 used, 3000 left");
}

#[tokio::test]
async fn every_upstream_status_consumes_a_call_5xx_included() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let (id, key) = (customer.account_id, &customer.api_key);
    assert_eq!(app.call("/vedic/v1/status/503", key).await.status(), 503);
    assert_eq!(app.call("/western/v1/status/404", key).await.status(), 404);
    app.wait_for_ledger(id, 2).await;

    let sql = "SELECT array_agg(upstream_status::int ORDER BY upstream_status)
               FROM subscription_tracking WHERE account_id = $1";
    let statuses: Vec<i32> = scalar(&app.db.pool, sql, id).await;
    assert_eq!(statuses, [404, 503]);
    let current = usage_json(&app.usage_of(id).await);
    assert_eq!(current, "free: 2 of 3000 used, 2998 left");
}

#[tokio::test]
async fn a_gateway_502_consumes_no_call() {
    // A bound socket that never listens: its port refuses connections, and no other
    // test can take it over (a dropped listener's port could be reused meanwhile).
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = reserved.local_addr().unwrap();
    let mut app = spawn_app_with(|c| c.upstream.base_url = format!("http://{closed}")).await;
    let customer = app.signup().await;
    let res = app.call(DAILY, &customer.api_key).await;
    assert_error(res, 502, "UPSTREAM_UNAVAILABLE").await;
    assert_nothing_accounted(&mut app, customer.account_id).await;
}

#[tokio::test]
async fn a_gateway_504_consumes_no_call() {
    let mut app = spawn_app_with(|c| c.upstream.timeout_ms = 300).await;
    let customer = app.signup().await;
    let res = app.call("/vedic/v1/slow/3000", &customer.api_key).await;
    assert_error(res, 504, "UPSTREAM_TIMEOUT").await;
    assert_nothing_accounted(&mut app, customer.account_id).await;
}

#[tokio::test]
async fn a_refused_key_consumes_no_call() {
    let mut app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let revoke = app.url(&format!("/account/v1/keys/{}", customer.key_id));
    let res = app.client.delete(revoke).bearer_auth(token).send().await;
    assert_eq!(res.unwrap().status(), 204);

    let res = app.call(DAILY, &customer.api_key).await;
    assert_error(res, 401, "INVALID_API_KEY").await;
    let res = app.client.get(app.url(DAILY)).send().await.unwrap();
    assert_error(res, 401, "INVALID_API_KEY").await;
    assert!(app.upstream.recorded().is_empty());
    assert_nothing_accounted(&mut app, customer.account_id).await;
}

#[tokio::test]
async fn throttled_calls_consume_nothing_and_admitted_ones_count_beyond_the_allowance() {
    let mut app = spawn_app_with(|c| c.usage.free_monthly_calls = 3).await;
    let customer = app.signup().await;
    let (id, key) = (customer.account_id, &customer.api_key);
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, key).await.status(), 200);
    }
    app.wait_for_ledger(id, 3).await;
    let throttler = &app.state.throttler;
    let marked = || std::future::ready(throttler.is_marked(id, Utc::now()));
    wait_until("exhaustion marker written", marked).await;

    // About 20% of calls are admitted; go on until both outcomes were seen.
    let (mut admitted, mut throttled) = (0, 0);
    while admitted == 0 || throttled == 0 {
        assert!(admitted + throttled < 200, "both outcomes expected");
        let res = app.call(DAILY, key).await;
        if res.status() == 200 {
            admitted += 1;
            continue;
        }
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["code"], "REQUEST_THROTTLED");
        assert_eq!(body["message"], "Request throttled. Please try again.");
        throttled += 1;
    }
    app.stop().await;
    let used = 3 + admitted;
    assert_eq!(app.ledger_rows(id).await, used);
    assert_eq!(app.upstream.recorded().len() as i64, used);
    let now = Utc::now();
    let current = Month::containing(now).to_string();
    let over = usage(&app.db.pool, id, &current, now).await;
    assert_eq!(over, format!("free: {used} of 3 used, 0 left, exhausted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counter_equals_the_ledger_after_two_listeners_account_one_account_concurrently() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-09-01T08:00:00Z").await;
    let now = at("2026-10-31T12:00:00Z");
    let start = at("2026-10-01T00:00:00Z");
    let seconds = chrono::Duration::seconds;
    let october: Vec<_> = (0..4_000).map(|i| event(id, start + seconds(i))).collect();
    let september = events(id, at("2026-09-30T23:59:59.999Z"), 100);
    // Both replicas see the middle half of October, as after a redelivery.
    let first = october[..3_000].to_vec();
    let second: Vec<_> = october[1_000..].iter().chain(&september).cloned().collect();
    let run = |accountant: Accountant, events: Vec<UsageEvent>| {
        tokio::spawn(async move {
            let (mut accounted, mut duplicates) = (0, 0);
            for batch in events.chunks(250) {
                let outcome = accountant.account(batch, now).await.expect("accounted");
                accounted += outcome.accounted;
                duplicates += outcome.duplicates;
            }
            (accounted, duplicates)
        })
    };
    let other_pool = db.second_pool().await;
    let x = run(accountant(pool), first);
    let y = run(accountant(&other_pool), second);
    let ((ax, dx), (ay, dy)) = (x.await.unwrap(), y.await.unwrap());

    assert_eq!((ax + ay, dx + dy), (4_100, 2_000));
    assert_eq!(
        counter_and_ledger(pool, id, "2026-10").await,
        (4_000, 4_000)
    );
    assert_eq!(counter_and_ledger(pool, id, "2026-09").await, (100, 100));
    assert_eq!(report(pool, id, "2026-10", now).await.used, 4_000);
}

/// A usage listener over `pool` (batches of up to 16, a 10 s drain) and its queue.
struct Listener {
    publisher: tollgate::usage::event::UsagePublisher,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    fn start(pool: &PgPool, linger: Duration, concurrent_batches: usize, lanes: usize) -> Self {
        let (publisher, rx) = tollgate::usage::event::queue(16);
        let stop = CancellationToken::new();
        let settings = tollgate::usage::listener::ListenerSettings {
            batch_size: 16,
            batch_linger: linger,
            concurrent_batches,
            account_lanes: lanes,
            drain_timeout: Duration::from_secs(10),
        };
        let run = tollgate::usage::listener::run(accountant(pool), rx, settings, stop.clone());
        let task = tokio::spawn(run);
        Self {
            publisher,
            stop,
            task,
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

/// Waits until `account` has `n` ledger rows.
async fn wait_for_ledger_rows(pool: &PgPool, what: &str, account: i64, n: i64) {
    let sql = "SELECT count(*) FROM subscription_tracking WHERE account_id = $1";
    wait_until(what, || async {
        scalar::<i64>(pool, sql, account).await == n
    })
    .await;
}

/// With `stuck`'s row locked by `lock`: `other`'s call is accounted meanwhile and
/// `stuck`'s only once the lock is gone.
async fn accounting_passes_the_locked_account(
    pool: &PgPool,
    lock: sqlx::Transaction<'static, Postgres>,
    (stuck, other): (i64, i64),
) {
    wait_for_ledger_rows(
        pool,
        "the other account's call accounted meanwhile",
        other,
        1,
    )
    .await;
    let rows = "SELECT count(*) FROM subscription_tracking WHERE account_id = $1";
    assert_eq!(scalar::<i64>(pool, rows, stuck).await, 0);
    lock.rollback().await.unwrap();
    wait_for_ledger_rows(
        pool,
        "the stuck call accounted once the lock is gone",
        stuck,
        1,
    )
    .await;
}

#[tokio::test]
async fn a_listener_survives_an_event_the_database_refuses() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let listener = Listener::start(pool, Duration::from_millis(10), 2, 2);
    let now = Utc::now();
    let mut poisoned = event(id, now);
    poisoned.route = "/vedic/v1/\0".into(); // text columns refuse NUL bytes
    for e in [event(id, now), poisoned, event(id, now)] {
        listener.publisher.publish(e);
    }
    wait_for_ledger_rows(pool, "the good events of the batch accounted", id, 2).await;

    listener.publisher.publish(event(id, now));
    wait_for_ledger_rows(pool, "a later event accounted", id, 3).await;
    listener.stop().await;
}

#[tokio::test]
async fn a_batch_waits_its_linger_for_more_events() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let listener = Listener::start(pool, Duration::from_secs(2), 2, 2);
    let now = Utc::now();
    listener.publisher.publish(event(id, now));
    tokio::time::sleep(Duration::from_millis(20)).await;
    listener.publisher.publish(event(id, now));
    wait_for_ledger_rows(pool, "both events accounted", id, 2).await;
    // `recorded_at` is the transaction's start: one value means one transaction.
    let transactions = "SELECT count(DISTINCT recorded_at) FROM subscription_tracking
                        WHERE account_id = $1";
    assert_eq!(scalar::<i64>(pool, transactions, id).await, 1);
    listener.stop().await;
}

#[tokio::test]
async fn a_batch_waiting_on_a_locked_account_does_not_hold_up_the_next() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (stuck, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (other, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let listener = Listener::start(pool, Duration::ZERO, 2, 2);
    let lock = lock_account(pool, stuck).await;
    let now = Utc::now();
    listener.publisher.publish(event(stuck, now));
    let waiting = "SELECT count(*) FROM pg_stat_activity
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    wait_until("the first batch waits on the lock", || async {
        let query = sqlx::query_scalar::<_, i64>(waiting);
        query.fetch_one(pool).await.unwrap() == 1
    })
    .await;

    listener.publisher.publish(event(other, now));
    accounting_passes_the_locked_account(pool, lock, (stuck, other)).await;
    listener.stop().await;
}

#[tokio::test]
async fn a_batch_is_accounted_in_lanes_that_do_not_wait_for_each_other() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (stuck, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (other, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    assert_ne!(
        stuck % 2,
        other % 2,
        "the two accounts fall in different lanes"
    );
    let listener = Listener::start(pool, Duration::from_millis(200), 1, 2);
    let lock = lock_account(pool, stuck).await;
    let now = Utc::now();
    // One batch (the linger gathers both) holding a locked account and another one.
    listener.publisher.publish(event(stuck, now));
    listener.publisher.publish(event(other, now));
    accounting_passes_the_locked_account(pool, lock, (stuck, other)).await;
    listener.stop().await;
}

#[tokio::test]
async fn a_subscription_activated_while_a_batch_waits_for_the_lock_is_in_force_for_it() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let month = Month::containing(Utc::now());
    let signup = month.start().to_rfc3339();
    let (id, _) = customer_since(pool, &signup).await;
    // The free grant is used up.
    sqlx::query("INSERT INTO usage_counter (account_id, month_start, used) VALUES ($1, $2, $3)")
        .bind(id)
        .bind(month.start())
        .bind(FREE)
        .execute(pool)
        .await
        .unwrap();

    // An activation holds the account's lock while the batch starts and waits for it.
    let mut upgrade = lock_account(pool, id).await;
    let accountant = accountant(pool);
    let batch = vec![event(id, Utc::now())];
    let waiting_batch =
        tokio::spawn(async move { accountant.account_now(&batch, Locks::Wait).await });
    let waiting = "SELECT count(*) FROM pg_stat_activity
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    wait_until("the batch waits on the lock", || async {
        let query = sqlx::query_scalar::<_, i64>(waiting);
        query.fetch_one(pool).await.unwrap() == 1
    })
    .await;
    let insert = "INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
                  VALUES ($1, 'pro', $2, 10000)";
    let query = sqlx::query(insert).bind(id).bind(Utc::now());
    query.execute(&mut *upgrade).await.unwrap();
    upgrade.commit().await.unwrap();

    let outcome = waiting_batch.await.unwrap().unwrap();
    assert_eq!(outcome.accounted, 1);
    assert!(outcome.exhausted.is_empty(), "{outcome:?}");
}

#[tokio::test]
async fn a_full_queue_drops_events_without_touching_responses() {
    // One batch at a time and no linger: the listener takes the first event alone and
    // blocks on its lock.
    let mut app = spawn_app_with(|c| {
        c.usage_check.queue_capacity = 1;
        c.usage_check.batch_linger_ms = 0;
        c.usage_check.concurrent_batches = 1;
        c.usage_check.lock_timeout_ms = 60_000;
    })
    .await;
    let customer = app.signup().await;
    let lock = lock_account(&app.db.pool, customer.account_id).await;
    for _ in 0..10 {
        let res = app.call(DAILY, &customer.api_key).await;
        assert_eq!(res.status(), 200);
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["prediction"], "A good day to ship.");
    }
    // The listener is stuck on the first event and the queue holds at most one more.
    let dropped = app.state.usage.dropped();
    assert!((8..=9).contains(&dropped), "dropped {dropped}");

    lock.rollback().await.unwrap();
    app.stop().await;
    let accounted = app.ledger_rows(customer.account_id).await;
    assert_eq!(accounted, 10 - dropped as i64);
}

#[tokio::test]
async fn accounting_survives_losing_its_database_connection_mid_batch() {
    let app = spawn_app_with(|c| c.usage_check.lock_timeout_ms = 60_000).await;
    let customer = app.signup().await;
    let lock = lock_account(&app.db.pool, customer.account_id).await;
    for _ in 0..5 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    // The listener's connection waits on the lock; cut it as a failover would.
    let pool = app.db.pool.clone();
    let waiting = move || {
        let pool = pool.clone();
        async move {
            let killed: i64 = sqlx::query_scalar(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            killed > 0
        }
    };
    wait_until("listener connection terminated", waiting).await;
    lock.rollback().await.unwrap();
    app.wait_for_ledger(customer.account_id, 5).await;
    assert_eq!(app.state.usage.dropped(), 0);
}

#[tokio::test]
async fn shutdown_drains_the_queue_into_the_ledger() {
    let mut app = spawn_app_with(|c| c.usage_check.lock_timeout_ms = 60_000).await;
    let customer = app.signup().await;
    let lock = lock_account(&app.db.pool, customer.account_id).await;
    for _ in 0..20 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    let stopped = app.begin_shutdown().expect("gateway running");
    // Release the lock only once the public listener is gone, so that the drain
    // (not the running loop) accounts the queued events.
    let addr = app.addr;
    let closed = move || async move { tokio::net::TcpStream::connect(addr).await.is_err() };
    wait_until("public listener closed", closed).await;

    lock.rollback().await.unwrap();
    stopped.await.unwrap().expect("gateway stops cleanly");
    assert_eq!(app.ledger_rows(customer.account_id).await, 20);
    assert_eq!(app.state.usage.dropped(), 0);
}

#[tokio::test]
async fn local_mode_requires_keys_forwards_calls_and_meters_nothing() {
    let mut app = spawn_app_with(local_mode).await;
    assert!(app.accountant.is_none() && !app.state.usage.enabled());
    let customer = app.signup().await;
    let (id, db) = (customer.account_id, app.db.clone());
    let pool = &db.pool;
    let res = app.client.get(app.url(DAILY)).send().await.unwrap();
    assert_error(res, 401, "INVALID_API_KEY").await;
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    assert_eq!(app.upstream.recorded().len(), 1);

    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    let body = json!({"plan": "pro", "monthly_allowance": 10});
    assert_eq!(app.admin_post(&path, &body).await.status(), 201);
    assert!(snapshots(pool, id, ALL).await.is_empty(), "no snapshots");

    let now = Utc::now();
    let direct = Accountant::new(pool.clone(), FREE, false, Throttler::disabled());
    let outcome = direct.account(&[event(id, now)], now).await.unwrap();
    assert_eq!((outcome.ignored, outcome.accounted), (1, 0));
    app.stop().await;
    assert_eq!(app.ledger_rows(id).await, 0);
    let counters = "SELECT count(*) FROM usage_counter WHERE account_id = $1";
    assert_eq!(scalar::<i64>(pool, counters, id).await, 0);
}

#[tokio::test]
async fn local_mode_keeps_usage_history_readable() {
    let app = spawn_app_with(local_mode).await;
    let customer = app.signup().await;
    let (id, pool) = (customer.account_id, &app.db.pool);
    let sql = "INSERT INTO subscription_tracking
                   (transaction_id, account_id, occurred_at, method, route, upstream_status)
               SELECT gen_random_uuid(), $1, '2026-10-01T00:00Z'::timestamptz + n * interval '1h',
                      'GET', '/vedic/v1/x', 200
               FROM generate_series(1, 42) n";
    sqlx::query(sql).bind(id).execute(pool).await.unwrap();
    set_counter(pool, id, "2026-10", 42).await;

    let url = app.url("/account/v1/usage?month=2026-10");
    let res = app.client.get(url).header("x-api-key", &customer.api_key);
    let res = res.send().await.unwrap();
    assert_eq!(res.status(), 200);
    let october: Value = res.json().await.unwrap();
    assert_eq!(october["month_start"], "2026-10-01T00:00:00Z");
    assert_eq!(usage_json(&october), "free: 42 of 3000 used, 2958 left");
}

#[tokio::test]
async fn a_customer_reads_usage_with_a_session_or_an_api_key() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let (id, pool) = (customer.account_id, &app.db.pool);
    let current = Month::containing(Utc::now()).to_string();
    let sql = "SELECT id FROM subscription WHERE account_id = $1";
    let free: i64 = scalar(pool, sql, id).await;
    let signup_grant = snapshots(pool, id, ALL).await;
    assert_eq!(signup_grant, [snap(free, &current, FREE, true)]);
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    app.wait_for_ledger(id, 2).await;

    let usage = app.url("/account/v1/usage");
    let token = app.login(&customer).await;
    let by_session = app.client.get(&usage).bearer_auth(&token).send().await;
    let by_session = by_session.unwrap();
    assert_eq!(by_session.status(), 200);
    let by_session: Value = by_session.json().await.unwrap();
    assert_eq!(by_session["account_id"], id);
    assert_eq!(usage_json(&by_session), "free: 2 of 3000 used, 2998 left");
    let by_key = app
        .client
        .get(&usage)
        .header("x-api-key", &customer.api_key);
    let by_key = by_key.send().await.unwrap();
    assert_eq!(by_key.status(), 200);
    assert_eq!(by_key.json::<Value>().await.unwrap(), by_session);

    let res = app.client.get(&usage).send().await.unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
    let res = app
        .client
        .get(&usage)
        .bearer_auth("not-a-session")
        .send()
        .await;
    assert_error(res.unwrap(), 401, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn the_usage_object_describes_a_utc_month_of_history() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let id = customer.account_id;
    let listener = app.accountant.clone().expect("metering on");
    let september = events(id, at("2026-09-30T23:59:59.999Z"), 2);
    let later = at("2026-10-05T00:00:00Z");
    listener.account(&september, later).await.unwrap();
    set_counter(&app.db.pool, id, "2026-08", 3_500).await;
    let get = async |month: &str| -> Value {
        let url = app.url(&format!("/account/v1/usage?month={month}"));
        let req = app.client.get(url).header("x-api-key", &customer.api_key);
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    };

    let sept = get("2026-09").await;
    let mut keys: Vec<&str> = sept
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    let fields = [
        "account_id",
        "allowance",
        "exhausted",
        "month_end",
        "month_start",
    ];
    assert_eq!(keys, [&fields[..], &["plan", "remaining", "used"]].concat());
    assert_eq!(sept["month_start"], "2026-09-01T00:00:00Z");
    assert_eq!(sept["month_end"], "2026-10-01T00:00:00Z");
    assert_eq!(usage_json(&sept), "free: 2 of 3000 used, 2998 left");
    let path = format!("/admin/v1/accounts/{id}/usage?month=2026-09");
    let by_admin = app.admin_get(&path).await;
    assert_eq!(by_admin.json::<Value>().await.unwrap(), sept);

    let december = get("2026-12").await;
    assert_eq!(december["month_start"], "2026-12-01T00:00:00Z");
    assert_eq!(december["month_end"], "2027-01-01T00:00:00Z");
    let over = usage_json(&get("2026-08").await);
    assert_eq!(over, "free: 3500 of 3000 used, 0 left, exhausted");
    assert_eq!(get("2026-10").await["used"], 0);
}

#[tokio::test]
async fn a_malformed_month_is_refused_with_validation_failed() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let id = customer.account_id;
    for bad in [
        "2026-13", "2026-00", "2026-1", "26-01", "2026/01", "november", "9999-12", "0000-06",
    ] {
        let url = app.url(&format!("/account/v1/usage?month={bad}"));
        let req = app.client.get(url).header("x-api-key", &customer.api_key);
        assert_error(req.send().await.unwrap(), 422, "VALIDATION_FAILED").await;
        let path = format!("/admin/v1/accounts/{id}/usage?month={bad}");
        assert_error(app.admin_get(&path).await, 422, "VALIDATION_FAILED").await;
    }
}

#[tokio::test]
async fn usage_and_subscriptions_of_an_unknown_account_are_not_found() {
    let app = spawn_app().await;
    let res = app.admin_get("/admin/v1/accounts/987654/usage").await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
    let body = json!({"plan": "pro", "monthly_allowance": 10_000});
    let res = app
        .admin_post("/admin/v1/accounts/987654/subscriptions", &body)
        .await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
}

#[tokio::test]
async fn invalid_subscription_requests_are_refused_with_json_errors() {
    let app = spawn_app().await;
    let id = app.signup().await.account_id;
    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    let (start, earlier) = ("2026-12-01T00:00:00Z", "2026-11-01T00:00:00Z");
    for body in [
        json!({"plan": "free", "monthly_allowance": 10}),
        json!({"plan": "FREE", "monthly_allowance": 10}),
        json!({"plan": " ", "monthly_allowance": 10}),
        json!({"plan": "pro", "monthly_allowance": -1}),
        json!({"plan": "pro", "monthly_allowance": 10, "starts_at": start, "expires_at": earlier}),
        json!({"plan": "pro", "monthly_allowance": 10, "starts_at": start, "expires_at": start}),
        json!({"plan": "pro", "monthly_allowance": 10, "starts_at": "yesterday"}),
        json!({"plan": "pro"}),
        json!({"plan": "pro", "monthly_allowance": 10, "discount": 5}),
    ] {
        let res = app.admin_post(&path, &body).await;
        assert_eq!(res.status(), 422, "{body}");
        assert_error(res, 422, "VALIDATION_FAILED").await;
    }
    let req = app.client.post(app.url(&path)).bearer_auth(ADMIN_TOKEN);
    let req = req
        .header("content-type", "application/json")
        .body("{\"plan\": ");
    assert_error(req.send().await.unwrap(), 400, "MALFORMED_JSON").await;

    let sql = "SELECT count(*) FROM subscription WHERE account_id = $1";
    let subscriptions: i64 = scalar(&app.db.pool, sql, id).await;
    assert_eq!(subscriptions, 1, "only the free one");
}

#[tokio::test]
async fn admin_routes_require_the_admin_token() {
    let app = spawn_app().await;
    let id = app.signup().await.account_id;
    let body = json!({"plan": "pro", "monthly_allowance": 10_000});
    let usage = app.url(&format!("/admin/v1/accounts/{id}/usage"));
    let subscriptions = app.url(&format!("/admin/v1/accounts/{id}/subscriptions"));
    let reconcile = app.url("/admin/v1/reconcile");
    for token in [None, Some("wrong-token")] {
        for req in [
            app.client.get(&usage),
            app.client.post(&subscriptions).json(&body),
            app.client.post(&reconcile),
        ] {
            let req = match token {
                Some(t) => req.bearer_auth(t),
                None => req,
            };
            assert_error(req.send().await.unwrap(), 401, "UNAUTHORIZED").await;
        }
    }
    let sql = "SELECT count(*) FROM subscription WHERE account_id = $1";
    let subscriptions: i64 = scalar(&app.db.pool, sql, id).await;
    assert_eq!(subscriptions, 1, "no subscription added");
}
