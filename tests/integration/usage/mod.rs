//! Monthly usage accounting (SPEC §3.2–§3.4 and §4, issue 3), one test per rule.
//!
//! Rules that hinge on time run through the library with explicit instants
//! (`Accountant::account`, `usage_report`, `activate`) against real PostgreSQL; the
//! rest goes through the real gateway on port 0. Every test has its own database.
//! Usage objects are compared as one line, e.g. `"pro: 3000 of 10000 used, 7000 left"`.

mod api;
mod concurrency;
mod counting;
mod days;
mod faults;
mod listener;
mod local;
mod month_edges;
mod partitions;
mod preload;
mod queue;
mod subscriptions;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Postgres};
use tollgate::month::Month;
use tollgate::throttle::Throttler;
use tollgate::usage::UsageReport;
use tollgate::usage::accounting::{Accountant, BatchOutcome, UsageEvent};
use tollgate::usage::grants::create_free_subscription;
use tollgate::usage::report::usage_report;
use tollgate::usage::subscriptions::{Allocation, NewSubscription};
use uuid::Uuid;

use crate::common::eventually;

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
        cost: 1,
        reserved_by: None,
        key_reserved_by: None,
        latency_us: None,
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
        daily_allowance: None,
        enforcement: Default::default(),
        terms: Default::default(),
    };
    let allocation = Allocation {
        db: pool.clone(),
        throttler: Throttler::disabled(),
        quota: tollgate::usage::standing::QuotaView::disabled(),
        free_monthly_calls: FREE,
        metering: true,
        plans: Vec::new().into(),
    };
    let origin = tollgate::audit::Origin::SYSTEM;
    let activated = allocation.activate(account_id, &new, origin, at(now)).await;
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

/// Polls `check` for up to ten seconds; fails the test with `what` if it never holds.
async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    assert!(eventually(Duration::from_secs(10), check).await, "{what}");
}
