//! Accounting under database faults: a row lock held elsewhere, a read-only database.

use std::time::Instant;

use super::*;
use crate::common::*;

async fn calls(app: &TestApp, customer: &Customer, n: usize) {
    for _ in 0..n {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
}

#[tokio::test]
async fn a_row_lock_held_elsewhere_delays_only_its_own_account() {
    let mut app = spawn_app_with(|c| {
        c.usage_check.lock_timeout_ms = 200;
        // One batch at a time gathering both accounts' calls: without a bound on the
        // lock wait, the locked account's batch holds the other's calls back.
        c.usage_check.concurrent_batches = 1;
        c.usage_check.account_lanes = 1;
        c.usage_check.batch_linger_ms = 50;
    })
    .await;
    let stuck = app.signup().await;
    let other = app.signup().await;
    let lock = lock_account(&app.db.pool, stuck.account_id).await;

    let started = Instant::now();
    for _ in 0..3 {
        calls(&app, &stuck, 5).await;
        calls(&app, &other, 5).await;
    }
    app.wait_for_ledger(other.account_id, 15).await;
    println!(
        "other account accounted in {:?} while a row lock stood",
        started.elapsed()
    );
    assert_eq!(app.ledger_rows(stuck.account_id).await, 0);

    lock.rollback().await.unwrap();
    app.wait_for_ledger(stuck.account_id, 15).await;
    assert_eq!(app.state.usage.dropped(), 0);
    app.stop().await;
    assert_eq!(app.ledger_rows(stuck.account_id).await, 15);
    assert_eq!(app.ledger_rows(other.account_id).await, 15);
}

#[tokio::test]
async fn events_set_aside_behind_a_lock_are_accounted_by_the_shutdown_drain() {
    let mut app = spawn_app_with(|c| c.usage_check.lock_timeout_ms = 100).await;
    let stuck = app.signup().await;
    let lock = lock_account(&app.db.pool, stuck.account_id).await;
    calls(&app, &stuck, 10).await;
    // Long enough for the listener to give up waiting and set the events aside.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = app.begin_shutdown().expect("gateway running");
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.rollback().await.unwrap();
    stopping.await.unwrap().unwrap();
    assert_eq!(app.ledger_rows(stuck.account_id).await, 10);
}

/// Runs `sql` on the server's maintenance database (a read-only database cannot
/// change its own settings).
async fn on_server(sql: &str) {
    let pool = sqlx::PgPool::connect(&admin_url()).await.unwrap();
    sqlx::query(sql).execute(&pool).await.unwrap();
    pool.close().await;
}

async fn set_read_only(db: &str, on: bool) {
    let value = if on { "on" } else { "off" };
    on_server(&format!(
        "ALTER DATABASE {db} SET default_transaction_read_only = {value}"
    ))
    .await;
    // Sessions keep the setting they started with: end them, as a failover would.
    on_server(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{db}' AND pid <> pg_backend_pid()"
    ))
    .await;
}

#[tokio::test]
async fn a_read_only_database_is_a_transient_fault_and_no_event_is_discarded() {
    let mut app = spawn_app().await;
    let customer = app.signup().await;
    set_read_only(&app.db.name, true).await;
    calls(&app, &customer, 10).await;
    // Longer than every retry of a refused batch and of its events one by one.
    tokio::time::sleep(Duration::from_secs(4)).await;
    set_read_only(&app.db.name, false).await;
    app.wait_for_ledger(customer.account_id, 10).await;
    app.stop().await;
    assert_eq!(app.ledger_rows(customer.account_id).await, 10);
}
