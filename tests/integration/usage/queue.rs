//! The gateway's usage queue: full, cut off from its database, drained on shutdown.

use super::*;
use crate::common::*;

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
