//! Reconciliation of markers with PostgreSQL, and the bulk endpoints it and a burst of
//! exhaustions use.

use chrono::Utc;
use tollgate_testkit::fake_kv::{FakeKv, Fault};

use super::*;

/// Waits until a listing that started after this call has completed, so the view
/// reflects what KV holds now.
async fn wait_for_a_fresh_refresh(kv: &FakeKv) {
    let listed = kv.calls().iter().filter(|c| is_list(c)).count();
    wait_for_lists(kv, listed + 2).await;
}

async fn reconcile(app: &TestApp) -> (StatusCode, Value) {
    let res = app.admin_post("/admin/v1/reconcile", &json!({})).await;
    (res.status(), res.json().await.unwrap())
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
fn one_call_each(accounts: &[i64]) -> Vec<tollgate::usage::accounting::UsageEvent> {
    accounts
        .iter()
        .map(|&account_id| tollgate::usage::accounting::UsageEvent {
            transaction_id: uuid::Uuid::new_v4(),
            account_id,
            key_id: 0,
            occurred_at: Utc::now(),
            method: axum::http::Method::GET,
            route: PATH.into(),
            upstream_status: 200,
            cost: 1,
            reserved_by: None,
            key_reserved_by: None,
            latency_us: None,
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
async fn a_burst_of_exhaustions_costs_one_bulk_write() {
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
    // The fleet's table says which markers exist: no listing, which is the lister's
    // job alone (SPEC §8).
    let seen = methods_and_paths(&kv);
    assert_eq!(seen, [("PUT".into(), "/bulk".into())]);
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
