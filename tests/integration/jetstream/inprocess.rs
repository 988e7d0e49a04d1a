//! The JetStream transport of usage events (SPEC §8) in one process: the real gateway
//! on port 0 against real PostgreSQL and a real NATS server. Every test has its own
//! database and its own stream, subject and consumer, deleted when it ends; the test
//! that stops NATS runs a `nats-server` of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{NatsServer, TestStream};
use crate::common::*;
use tollgate::usage::accounting::UsageEvent;
use uuid::Uuid;

const DAILY: &str = "/vedic/v1/horoscope/daily";

async fn ledger_total(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM subscription_tracking")
        .fetch_one(&app.db.pool)
        .await
        .unwrap()
}

/// Waits (bounded) until the ledger holds `n` rows, and checks it never holds more.
async fn wait_for_total(app: &TestApp, n: i64, within: Duration) {
    let reached = eventually(within, || async { ledger_total(app).await >= n }).await;
    let rows = ledger_total(app).await;
    assert!(reached, "the ledger has {rows} rows, expected {n}");
    assert_eq!(rows, n, "more ledger rows than calls");
}

#[tokio::test]
async fn calls_are_accounted_through_the_stream_and_leave_it() {
    let js = TestStream::new();
    let app = spawn_app_with(|c| js.apply(c)).await;
    let customer = app.signup().await;
    for _ in 0..25 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    app.wait_for_ledger(customer.account_id, 25).await;
    // Every message was acknowledged once its transaction committed: the work queue is empty.
    assert!(
        eventually(Duration::from_secs(5), || async {
            js.messages().await == 0
        })
        .await
    );
    assert_eq!(app.usage_of(customer.account_id).await["used"], 25);
}

#[tokio::test]
async fn a_replica_that_only_publishes_leaves_its_events_to_a_consumer() {
    let js = TestStream::new();
    let publisher = spawn_app_with(|c| {
        js.apply(c);
        c.usage_check.consume = false;
    })
    .await;
    let customer = publisher.signup().await;
    for _ in 0..10 {
        assert_eq!(publisher.call(DAILY, &customer.api_key).await.status(), 200);
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            js.messages().await == 10
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(publisher.ledger_rows(customer.account_id).await, 0);

    let mut config = test_config(&publisher.db, &publisher.upstream);
    js.apply(&mut config);
    let consumer = spawn_replica(publisher.db.clone(), publisher.upstream.clone(), config).await;
    consumer.wait_for_ledger(customer.account_id, 10).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            js.messages().await == 0
        })
        .await
    );
}

#[tokio::test]
async fn a_message_delivered_twice_is_accounted_once() {
    let js = TestStream::new();
    let app = spawn_app_with(|c| js.apply(c)).await;
    let customer = app.signup().await;
    let event = UsageEvent {
        transaction_id: Uuid::new_v4(),
        account_id: customer.account_id,
        key_id: customer.key_id,
        occurred_at: chrono::Utc::now(),
        method: axum::http::Method::GET,
        route: DAILY.into(),
        upstream_status: 200,
        cost: 1,
        reserved_by: None,
        key_reserved_by: None,
        latency_us: None,
    };
    let context = js.jetstream().await;
    let (headers, payload) = tollgate::usage::accounting::jetstream::encode(&event);
    // The same publish retried: the stream's duplicate window stores it once.
    for _ in 0..2 {
        let ack = context
            .publish_with_headers(js.subject.clone(), headers.clone(), payload.clone())
            .await
            .unwrap();
        ack.await.unwrap();
    }
    app.wait_for_ledger(customer.account_id, 1).await;
    // The same event under another message id (a publish retried after the window):
    // the ledger's unique transaction id makes it a no-op.
    let mut other = async_nats::HeaderMap::new();
    other.insert("Nats-Msg-Id", Uuid::new_v4().to_string());
    let ack = context
        .publish_with_headers(js.subject.clone(), other, payload)
        .await
        .unwrap();
    ack.await.unwrap();
    // And a message that carries no event is set apart, holding nothing up.
    let ack = context
        .publish(js.subject.clone(), "not an event".into())
        .await
        .unwrap();
    ack.await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            js.messages().await == 0
        })
        .await
    );
    assert_eq!(app.ledger_rows(customer.account_id).await, 1);
    assert_eq!(app.usage_of(customer.account_id).await["used"], 1);
}

#[tokio::test]
async fn a_locked_account_holds_back_only_its_own_messages() {
    let js = TestStream::new();
    let app = spawn_app_with(|c| {
        js.apply(c);
        c.usage_check.lock_timeout_ms = 200;
    })
    .await;
    let (locked, free) = (app.signup().await, app.signup().await);
    let mut lock = app.db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM account WHERE id = $1 FOR UPDATE")
        .bind(locked.account_id)
        .execute(&mut *lock)
        .await
        .unwrap();
    for customer in [&locked, &free, &locked, &free] {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    app.wait_for_ledger(free.account_id, 2).await;
    // The locked account's events are set aside, their messages unacknowledged.
    assert!(
        eventually(Duration::from_secs(5), || async {
            js.messages().await == 2
        })
        .await
    );
    assert_eq!(app.ledger_rows(locked.account_id).await, 0);

    lock.rollback().await.unwrap();
    app.wait_for_ledger(locked.account_id, 2).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            js.messages().await == 0
        })
        .await
    );
}

#[tokio::test]
async fn nats_stopped_and_restarted_under_load_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut server) = NatsServer::start(dir.path()) else {
        eprintln!("SKIPPED: no nats-server binary (install Debian's nats-server package)");
        return;
    };
    let js = TestStream::on(&server.url());
    let app = spawn_app_with(|c| js.apply(c)).await;
    let keys = vec![app.signup().await.api_key, app.signup().await.api_key];

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(super::load(
        vec![app.base.clone()],
        keys,
        8,
        u64::MAX,
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill();
    let (at_kill, calls_at_kill) = (ledger_total(&app).await, app.upstream.recorded().len());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let at_restart = ledger_total(&app).await;
    let calls_while_down = app.upstream.recorded().len() - calls_at_kill;
    server.restart();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let seen = load.await.unwrap();

    println!(
        "NATS killed for 1.5 s under load: {} answers ({calls_while_down} while it was down), \
         {} failed, {} not 2xx, {} dropped; ledger {at_kill} rows at the kill, {at_restart} at \
         the restart",
        seen.ok,
        seen.failed,
        seen.other,
        app.state.usage.dropped()
    );
    assert_eq!((seen.failed, seen.other), (0, 0), "the proxy kept serving");
    assert_eq!(app.state.usage.dropped(), 0, "the queue had room");
    wait_for_total(&app, seen.ok as i64, Duration::from_secs(30)).await;
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT transaction_id FROM subscription_tracking")
        .fetch_all(&app.db.pool)
        .await
        .unwrap();
    assert!(ids.iter().all(|id| seen.answered.contains(id)));
}
