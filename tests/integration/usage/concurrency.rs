//! Two accountants on one database at once: one free grant per month, a duplicate
//! accounted once, the counter equal to the ledger.

use super::*;
use crate::common::TestDb;

impl TestDb {
    /// Another pool on the same database, as a second replica would have.
    async fn second_pool(&self) -> PgPool {
        tollgate::db::connect(
            &secrecy::SecretString::from(self.url.clone()),
            20,
            Duration::from_secs(10),
        )
        .await
        .expect("test database answers")
    }
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
