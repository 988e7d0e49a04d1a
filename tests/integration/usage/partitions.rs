//! The ledger partitioned by UTC month (migration V13): rows recorded before it survive,
//! redelivered events still count once, account deletion still cascades, and no event is
//! lost for want of a partition, even after an operator detaches a month.

use super::*;
use crate::common::{TestDb, spawn_app};

/// Whether `month`'s partition is attached to the ledger.
async fn has_partition(pool: &PgPool, m: Month) -> bool {
    let name = format!("subscription_tracking_{}", m.start().format("y%Ym%m"));
    let sql = "SELECT EXISTS (SELECT 1 FROM pg_inherits
                              WHERE inhparent = 'subscription_tracking'::regclass
                                AND inhrelid = to_regclass($1))";
    sqlx::query_scalar(sql)
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn ledger_ids(pool: &PgPool, account_id: i64) -> Vec<Uuid> {
    let sql = "SELECT transaction_id FROM subscription_tracking WHERE account_id = $1
               ORDER BY transaction_id";
    let query = sqlx::query_scalar(sql).bind(account_id);
    query.fetch_all(pool).await.unwrap()
}

#[tokio::test]
async fn rows_recorded_before_the_partitions_survive_and_still_deduplicate() {
    let db = TestDb::migrated_to(Some(12)).await;
    let pool = &db.pool;
    let id = legacy_account(pool, "2026-01-01T00:00:00Z").await;
    let now = Utc::now();
    let old = [
        event(id, at("2026-08-31T23:59:59.999999Z")),
        event(id, at("2026-09-15T12:00:00Z")),
        event(id, at("2026-10-01T00:00:00Z")),
        event(id, now),
    ];
    for e in &old {
        let sql = "INSERT INTO subscription_tracking
                       (transaction_id, account_id, key_id, occurred_at, method, route,
                        upstream_status)
                   VALUES ($1, $2, 1, $3, 'GET', '/vedic/v1/x', 200)";
        let query = sqlx::query(sql).bind(e.transaction_id).bind(id);
        query.bind(e.occurred_at).execute(pool).await.unwrap();
    }
    let mut expected: Vec<Uuid> = old.iter().map(|e| e.transaction_id).collect();
    expected.sort();

    tollgate::db::migrate_to(&secrecy::SecretString::from(db.url.clone()), None)
        .await
        .unwrap();
    assert_eq!(ledger_ids(pool, id).await, expected);
    assert!(has_partition(pool, Month::containing(now).next()).await);

    // The same events delivered again change nothing; a new one is recorded.
    let fresh = event(id, now);
    let mut again = old.to_vec();
    again.push(fresh.clone());
    let outcome = account(pool, &again, now).await;
    assert_eq!((outcome.accounted, outcome.duplicates), (1, 4));
    expected.push(fresh.transaction_id);
    expected.sort();
    assert_eq!(ledger_ids(pool, id).await, expected);
}

#[tokio::test]
async fn a_redelivered_event_is_recorded_once() {
    let db = TestDb::new().await;
    let (id, _) = customer_since(&db.pool, "2026-11-01T00:00:00Z").await;
    let now = at("2026-11-20T10:00:00Z");
    let e = event(id, now);
    assert_eq!(
        account(&db.pool, std::slice::from_ref(&e), now)
            .await
            .accounted,
        1
    );
    let outcome = account(&db.pool, &[e.clone(), e], now).await;
    assert_eq!((outcome.accounted, outcome.duplicates), (0, 2));
    assert_eq!(counter_and_ledger(&db.pool, id, "2026-11").await, (1, 1));
}

#[tokio::test]
async fn deleting_an_account_deletes_its_ledger_rows_in_every_month() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (gone, _) = customer_since(pool, "2026-09-01T00:00:00Z").await;
    let (kept, _) = customer_since(pool, "2026-09-01T00:00:00Z").await;
    let now = at("2026-11-20T10:00:00Z");
    for m in [
        "2026-09-10T00:00:00Z",
        "2026-10-10T00:00:00Z",
        "2026-11-10T00:00:00Z",
    ] {
        account(pool, &[event(gone, at(m)), event(kept, at(m))], now).await;
    }
    sqlx::query("DELETE FROM account WHERE id = $1")
        .bind(gone)
        .execute(pool)
        .await
        .unwrap();
    assert!(ledger_ids(pool, gone).await.is_empty());
    assert_eq!(ledger_ids(pool, kept).await.len(), 3);
}

#[tokio::test]
async fn the_next_months_partition_exists_once_the_gateway_started() {
    let app = spawn_app().await;
    let current = Month::containing(Utc::now());
    for m in [current, current.next()] {
        wait_until(&format!("a partition for {m}"), || {
            has_partition(&app.db.pool, m)
        })
        .await;
    }
}

#[tokio::test]
async fn an_event_in_a_month_without_a_partition_is_still_accounted() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2025-01-01T00:00:00Z").await;
    let march = at("2025-03-15T08:00:00Z");
    assert!(!has_partition(pool, Month::containing(march)).await);
    let accountant = accountant(pool);
    let now = at("2026-11-20T10:00:00Z");
    let outcome = accountant.account(&[event(id, march)], now).await.unwrap();
    assert_eq!(outcome.accounted, 1);
    assert!(has_partition(pool, Month::containing(march)).await);

    // Dropped behind this accountant's back: the event still counts.
    sqlx::query("DROP TABLE subscription_tracking_y2025m03")
        .execute(pool)
        .await
        .unwrap();
    let outcome = accountant.account(&[event(id, march)], now).await.unwrap();
    assert_eq!(outcome.accounted, 1);
    assert_eq!(ledger_ids(pool, id).await.len(), 1);
}

#[tokio::test]
async fn an_operator_detaches_an_old_month_in_one_statement_and_calls_still_count() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let (id, pool) = (customer.account_id, &app.db.pool);
    let accountant = app.accountant.clone().expect("the gateway accounts usage");
    let old = at("2025-06-10T00:00:00Z");
    let outcome = accountant.account(&[event(id, old)], Utc::now()).await;
    assert_eq!(outcome.unwrap().accounted, 1);
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    app.wait_for_ledger(id, 2).await;

    sqlx::query(
        "ALTER TABLE subscription_tracking DETACH PARTITION subscription_tracking_y2025m06",
    )
    .execute(pool)
    .await
    .unwrap();
    app.wait_for_ledger(id, 1).await;
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM subscription_tracking_y2025m06")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(kept, 1, "the detached month keeps its rows");

    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    app.wait_for_ledger(id, 2).await;
    // A late event for the detached month still counts, in a partition of its own.
    let outcome = accountant.account(&[event(id, old)], Utc::now()).await;
    assert_eq!(outcome.unwrap().accounted, 1);
    app.wait_for_ledger(id, 3).await;
}

#[tokio::test]
async fn a_row_inserted_by_hand_without_its_months_partition_is_kept_and_moved_later() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2024-01-01T00:00:00Z").await;
    let april = at("2024-04-02T03:04:05Z");
    assert!(!has_partition(pool, Month::containing(april)).await);
    let sql = "INSERT INTO subscription_tracking
                   (transaction_id, account_id, key_id, occurred_at, method, route,
                    upstream_status)
               VALUES ($1, $2, 1, $3, 'GET', '/vedic/v1/x', 200)";
    let e = event(id, april);
    let query = sqlx::query(sql).bind(e.transaction_id).bind(id).bind(april);
    query.execute(pool).await.unwrap();
    assert_eq!(ledger_ids(pool, id).await, vec![e.transaction_id]);

    // Making April's partition moves the row into it; the same event is still a duplicate.
    let outcome = accountant(pool)
        .account(std::slice::from_ref(&e), april)
        .await
        .unwrap();
    assert_eq!((outcome.accounted, outcome.duplicates), (0, 1));
    assert!(has_partition(pool, Month::containing(april)).await);
    let in_default: i64 = sqlx::query_scalar("SELECT count(*) FROM subscription_tracking_default")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(in_default, 0);
    assert_eq!(ledger_ids(pool, id).await, vec![e.transaction_id]);
}
