//! Month boundaries: the last and first millisecond, grants made lazily in a new
//! month, and no marker for a month already past.

use secrecy::SecretString;

use super::*;
use crate::common::TestDb;

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
