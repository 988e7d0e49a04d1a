//! Usage per UTC day: the day being counted lives on the monthly counter row and moves
//! to `usage_daily_closed` when the account's next day begins (migration V16); readers
//! see every day through `usage_daily`, whichever place holds it.

use tollgate::usage::series;

use super::*;
use crate::common::TestDb;

/// Calls per day of `m` up to `now`, days without calls left out, as `"MM-DD: calls"`.
async fn days(pool: &PgPool, account_id: i64, m: &str, now: DateTime<Utc>) -> Vec<String> {
    let mut conn = pool.acquire().await.unwrap();
    let days = series::daily(&mut conn, account_id, month(m), now).await;
    days.unwrap()
        .into_iter()
        .filter(|d| d.calls > 0)
        .map(|d| {
            format!(
                "{}: {} calls, {} units",
                d.day.format("%m-%d"),
                d.calls,
                d.cost
            )
        })
        .collect()
}

/// The days `usage_daily_closed` holds for the account, as `"MM-DD: calls"`.
async fn closed_days(pool: &PgPool, account_id: i64) -> Vec<String> {
    let sql = "SELECT to_char(day_start AT TIME ZONE 'UTC', 'MM-DD') || ': ' || calls
               FROM usage_daily_closed WHERE account_id = $1 ORDER BY day_start";
    let query = sqlx::query_scalar(sql).bind(account_id);
    query.fetch_all(pool).await.unwrap()
}

#[tokio::test]
async fn a_day_is_counted_on_the_month_row_and_closed_when_the_next_begins() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let third = at("2026-11-03T10:00:00Z");
    account(pool, &events(id, third, 2), third).await;
    account(pool, &[event(id, third)], third).await;
    assert_eq!(closed_days(pool, id).await, Vec::<String>::new());
    assert_eq!(
        days(pool, id, "2026-11", third).await,
        ["11-03: 3 calls, 3 units"]
    );

    let fourth = at("2026-11-04T00:00:00Z");
    account(pool, &[event(id, fourth)], fourth).await;
    assert_eq!(closed_days(pool, id).await, ["11-03: 3"]);
    let both = ["11-03: 3 calls, 3 units", "11-04: 1 calls, 1 units"];
    assert_eq!(days(pool, id, "2026-11", fourth).await, both);
    assert_eq!(report(pool, id, "2026-11", fourth).await.used, 4);
    assert_eq!(counter_and_ledger(pool, id, "2026-11").await, (4, 4));
}

#[tokio::test]
async fn a_late_event_of_an_earlier_day_is_added_to_that_day() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (third, fourth) = (at("2026-11-03T10:00:00Z"), at("2026-11-04T10:00:00Z"));
    account(pool, &events(id, third, 2), third).await;
    account(pool, &[event(id, fourth)], fourth).await;
    // Delivered late, a day after it happened; and another of the open day with it.
    account(pool, &[event(id, third), event(id, fourth)], fourth).await;

    let both = ["11-03: 3 calls, 3 units", "11-04: 2 calls, 2 units"];
    assert_eq!(days(pool, id, "2026-11", fourth).await, both);
    assert_eq!(closed_days(pool, id).await, ["11-03: 3"]);
    assert_eq!(counter_and_ledger(pool, id, "2026-11").await, (5, 5));
}

#[tokio::test]
async fn a_batch_across_midnight_counts_each_day() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (before, after) = (at("2026-11-03T23:59:59.999Z"), at("2026-11-04T00:00:00Z"));
    let batch = [event(id, before), event(id, after), event(id, after)];
    account(pool, &batch, after).await;

    let both = ["11-03: 1 calls, 1 units", "11-04: 2 calls, 2 units"];
    assert_eq!(days(pool, id, "2026-11", after).await, both);
    assert_eq!(counter_and_ledger(pool, id, "2026-11").await, (3, 3));
}

#[tokio::test]
async fn a_new_month_opens_its_own_row_and_a_late_event_of_the_last_keeps_to_its_month() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-10-15T08:00:00Z").await;
    let (last, first) = (at("2026-10-31T12:00:00Z"), at("2026-11-01T12:00:00Z"));
    account(pool, &[event(id, last)], last).await;
    account(pool, &[event(id, first)], first).await;
    account(pool, &[event(id, last)], first).await;

    assert_eq!(
        days(pool, id, "2026-10", first).await,
        ["10-31: 2 calls, 2 units"]
    );
    assert_eq!(
        days(pool, id, "2026-11", first).await,
        ["11-01: 1 calls, 1 units"]
    );
    // Each month's row still holds its own last day open.
    assert_eq!(closed_days(pool, id).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_day_counted_before_the_upgrade_moves_onto_the_row_and_is_judged_whole() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let now = at("2026-11-03T10:00:00Z");
    let plan = NewSubscription {
        plan: "daily".into(),
        monthly_allowance: 10_000,
        starts_at: at("2026-11-01T00:00:00Z"),
        expires_at: None,
        daily_allowance: Some(6),
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
    allocation.activate(id, &plan, origin, now).await.unwrap();
    // Five calls of today counted as a release before V16 left them: in the day table,
    // and a monthly row with no open day.
    let before_the_upgrade = [
        "INSERT INTO usage_daily_closed (account_id, day_start, calls, used)
         VALUES ($1, '2026-11-03Z', 5, 5)",
        "INSERT INTO usage_counter (account_id, month_start, used) VALUES ($1, '2026-11-01Z', 5)
         ON CONFLICT (account_id, month_start) DO UPDATE SET used = 5",
    ];
    for sql in before_the_upgrade {
        sqlx::query(sql).bind(id).execute(pool).await.unwrap();
    }

    let outcome = account(pool, &[event(id, now)], now).await;
    let standing = &outcome.standings[0];
    assert_eq!(standing.daily.map(|d| d.used), Some(6), "{standing:?}");
    assert_eq!(
        days(pool, id, "2026-11", now).await,
        ["11-03: 6 calls, 6 units"]
    );
    assert_eq!(closed_days(pool, id).await, Vec::<String>::new());
}

#[tokio::test]
async fn every_accounts_calls_per_day_are_summed_from_closed_and_open_days() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (a, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (b, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (third, fourth) = (at("2026-11-03T10:00:00Z"), at("2026-11-04T10:00:00Z"));
    account(pool, &events(a, third, 2), third).await;
    account(pool, &[event(a, fourth), event(b, fourth)], fourth).await;
    assert_eq!(closed_days(pool, a).await, ["11-03: 2"]);

    let mut conn = pool.acquire().await.unwrap();
    let past = series::PastDays::default();
    let totals = series::daily_totals(&mut conn, &past, month("2026-11"), fourth).await;
    let with_calls: Vec<String> = totals
        .unwrap()
        .into_iter()
        .filter(|d| d.calls > 0)
        .map(|d| format!("{}: {}", d.day.format("%m-%d"), d.calls))
        .collect();
    assert_eq!(with_calls, ["11-03: 2", "11-04: 2"]);
}

#[tokio::test]
async fn a_batch_of_late_events_only_leaves_the_open_day_as_it_was() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let (id, _) = customer_since(pool, "2026-11-01T08:00:00Z").await;
    let (second, fourth) = (at("2026-11-02T10:00:00Z"), at("2026-11-04T10:00:00Z"));
    account(pool, &events(id, fourth, 2), fourth).await;
    account(pool, &events(id, second, 3), fourth).await;

    let both = ["11-02: 3 calls, 3 units", "11-04: 2 calls, 2 units"];
    assert_eq!(days(pool, id, "2026-11", fourth).await, both);
    assert_eq!(closed_days(pool, id).await, ["11-02: 3"]);
    assert_eq!(counter_and_ledger(pool, id, "2026-11").await, (5, 5));
}
