//! The usage listener on its own: a refused event, the batch linger, and batches and
//! lanes that do not wait for a locked account.

use tokio_util::sync::CancellationToken;

use super::*;
use crate::common::TestDb;

/// A usage listener over `pool` (batches of up to 16, a 10 s drain) and its queue.
struct Listener {
    publisher: tollgate::usage::accounting::event::UsagePublisher,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    fn start(pool: &PgPool, linger: Duration, concurrent_batches: usize, lanes: usize) -> Self {
        let (publisher, rx) = tollgate::usage::accounting::event::queue(16);
        let stop = CancellationToken::new();
        let settings = tollgate::usage::accounting::listener::ListenerSettings {
            batch_size: 16,
            batch_linger: linger,
            concurrent_batches,
            account_lanes: lanes,
            drain_timeout: Duration::from_secs(10),
        };
        let run = tollgate::usage::accounting::listener::run(
            accountant(pool),
            rx,
            settings,
            stop.clone(),
        );
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
async fn a_batch_that_fills_goes_without_waiting_out_its_linger() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    // A linger far past the 10 s the wait allows: only a full batch can be accounted.
    let listener = Listener::start(pool, Duration::from_secs(600), 1, 1);
    let now = Utc::now();
    listener.publisher.publish(event(id, now));
    // The listener lingers over the first event before the other fifteen arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..15 {
        listener.publisher.publish(event(id, now));
    }
    wait_for_ledger_rows(pool, "the full batch accounted at once", id, 16).await;
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
    let waiting_batch = tokio::spawn(async move {
        accountant
            .account_now(&batch, tollgate::usage::accounting::Locks::Wait)
            .await
    });
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
