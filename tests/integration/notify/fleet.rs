//! Several replicas: replicas and redeliveries record each threshold once a month, one
//! replica delivers at a time, and one stopped mid-way leaves its events to the next.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tollgate::throttle::Throttler;
use tollgate::usage::accounting::{Accountant, UsageEvent};
use tollgate::usage::grants::create_free_subscription;
use tollgate::usage::standing::QuotaView;
use tollgate::usage::subscriptions::{Allocation, NewSubscription};

use super::*;
use crate::common::{TestDb, spawn_app_with, spawn_replica, test_config};

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// An accountant of a replica with webhooks on, waiting for locks as long as needed.
fn replica(pool: &PgPool) -> Accountant {
    Accountant::new(pool.clone(), 3_000, true, Throttler::disabled())
        .with_thresholds(&[80, 100])
        .with_lock_timeout(Duration::from_secs(60))
}

/// One-unit calls of `account_id`, a second apart from `start`.
fn calls_from(account_id: i64, start: &str, n: i64) -> Vec<UsageEvent> {
    (0..n)
        .map(|i| UsageEvent {
            transaction_id: uuid::Uuid::new_v4(),
            account_id,
            key_id: 1,
            occurred_at: at(start) + chrono::Duration::seconds(i),
            method: axum::http::Method::GET,
            route: DAILY.into(),
            upstream_status: 200,
            cost: 1,
            reserved_by: None,
            key_reserved_by: None,
            latency_us: None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_and_redelivered_events_record_each_threshold_once_a_month() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let other = tollgate::db::connect(
        &secrecy::SecretString::from(db.url.clone()),
        5,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let account_id: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash, created_at)
         VALUES ('replicas@example.com', 'x', '2026-10-01T00:00:00Z') RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    create_free_subscription(
        &mut conn,
        account_id,
        at("2026-10-01T00:00:00Z"),
        3_000,
        true,
    )
    .await
    .unwrap();
    drop(conn);
    let allocation = Allocation {
        db: pool.clone(),
        throttler: Throttler::disabled(),
        quota: QuotaView::disabled(),
        free_monthly_calls: 3_000,
        metering: true,
        plans: Vec::new().into(),
    };
    let tiny = NewSubscription {
        plan: "tiny".into(),
        monthly_allowance: 10,
        starts_at: at("2026-11-01T00:00:00Z"),
        expires_at: None,
        daily_allowance: None,
        enforcement: Default::default(),
        terms: Default::default(),
    };
    allocation
        .activate(
            account_id,
            &tiny,
            tollgate::audit::Origin::SYSTEM,
            at("2026-11-01T00:00:00Z"),
        )
        .await
        .unwrap();

    // Both replicas get the middle of November, in small batches, at the same time.
    let november = calls_from(account_id, "2026-11-10T00:00:00Z", 20);
    let now = at("2026-11-20T00:00:00Z");
    let run = |accountant: Accountant, events: Vec<UsageEvent>| {
        tokio::spawn(async move {
            for batch in events.chunks(3) {
                accountant.account(batch, now).await.expect("accounted");
            }
        })
    };
    let (x, y) = (
        run(replica(pool), november[..14].to_vec()),
        run(replica(&other), november[6..].to_vec()),
    );
    x.await.unwrap();
    y.await.unwrap();
    // Then all of it again, as a redelivery after a lost acknowledgement.
    let again = replica(&other).account(&november, now).await.unwrap();
    assert_eq!(again.accounted, 0);
    // December starts afresh.
    let december = calls_from(account_id, "2026-12-05T00:00:00Z", 12);
    replica(pool)
        .account(&december, at("2026-12-06T00:00:00Z"))
        .await
        .unwrap();

    let rows: Vec<(String, i16, i64, i64)> = sqlx::query_as(
        "SELECT to_char(month_start AT TIME ZONE 'UTC', 'YYYY-MM'), threshold, used, allowance
           FROM notification_outbox WHERE account_id = $1 ORDER BY month_start, threshold",
    )
    .bind(account_id)
    .fetch_all(pool)
    .await
    .unwrap();
    let row = |m: &str, t: i16, used: i64| (m.to_owned(), t, used, 10);
    assert_eq!(
        rows,
        [
            row("2026-11", 80, 8),
            row("2026-11", 100, 10),
            row("2026-12", 80, 8),
            row("2026-12", 100, 10),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gateway_sends_nothing_while_the_first_holds_the_delivery_lease() {
    let receiver = Receiver::start().await;
    // Slow answers leave two deliverers every chance to pick the same events.
    receiver.delay(Duration::from_millis(200));
    let mut first = spawn_app_with(|c| notify_to(c, &receiver)).await;
    let mut config = test_config(&first.db, &first.upstream);
    notify_to(&mut config, &receiver);
    let second = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;

    for i in 0..6 {
        let app = if i % 2 == 0 { &first } else { &second };
        let customer = app.signup().await;
        app.plan(&customer, 5).await;
        app.calls(&customer, DAILY, 5).await;
    }
    wait_for_delivered(&receiver, 12, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let holders: i64 = sqlx::query_scalar("SELECT count(*) FROM notification_lease")
        .fetch_one(&first.db.pool)
        .await
        .unwrap();
    assert_eq!(holders, 1);

    // Whichever held it, the one left delivers what comes next.
    first.stop().await;
    let late = second.signup().await;
    second.plan(&late, 5).await;
    second.calls(&late, DAILY, 5).await;
    wait_for_delivered(&receiver, 14, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let counts = deliveries_per_id(&receiver);
    assert_eq!(counts.len(), 14);
    assert!(
        counts.values().all(|n| *n == 1),
        "an event was sent twice: {:?}",
        summary(&receiver)
    );
    assert_eq!(receiver.requests().len(), 14, "{:?}", summary(&receiver));
}

#[tokio::test]
async fn a_gateway_stopped_mid_way_leaves_its_events_to_the_next_one() {
    let receiver = Receiver::start().await;
    receiver.answer(Answer::Status(503));
    let mut first = spawn_app_with(|c| notify_to(c, &receiver)).await;
    let customers = [first.signup().await, first.signup().await];
    for customer in &customers {
        first.plan(customer, 5).await;
        first.calls(customer, DAILY, 5).await;
    }
    let tried = eventually(Duration::from_secs(5), || async {
        receiver.requests().len() >= 4
    })
    .await;
    assert!(tried, "{:?}", summary(&receiver));
    first.stop().await;
    assert!(receiver.delivered().is_empty());

    receiver.answer(Answer::Ok);
    let mut config = test_config(&first.db, &first.upstream);
    notify_to(&mut config, &receiver);
    let _second = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    wait_for_delivered(&receiver, 4, Duration::from_secs(10)).await;
    let (a, b) = (customers[0].account_id, customers[1].account_id);
    let mut pairs = delivered_pairs(&receiver);
    pairs.sort_by_key(|(account, _)| *account);
    assert_eq!(pairs, [(a, 80), (a, 100), (b, 80), (b, 100)]);
    assert!(deliveries_per_id(&receiver).values().all(|n| *n == 1));
}
