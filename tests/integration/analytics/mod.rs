//! Usage analytics per route, key and day (SPEC §18), through the real server: sums
//! equal the ledger, grouping by key and route, the bound on routes, the 93-day range,
//! another account's data never shown, and latency percentiles within 5% of the
//! latencies a slow upstream caused.

use chrono::Utc;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::*;

async fn get(app: &TestApp, path: &str, token: &str) -> reqwest::Response {
    app.client
        .request(Method::GET, app.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

fn rows(report: &Value) -> &Vec<Value> {
    report["rows"].as_array().expect("rows")
}

fn sum(report: &Value, field: &str) -> i64 {
    rows(report)
        .iter()
        .map(|r| r[field].as_i64().unwrap())
        .sum()
}

#[tokio::test]
async fn sums_equal_the_ledger_by_day_route_and_key() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let res = app
        .client
        .post(app.url("/account/v1/keys"))
        .bearer_auth(&token)
        .json(&json!({"name": "second"}))
        .send()
        .await
        .unwrap();
    let second: Value = res.json().await.unwrap();
    let second_key = second["api_key"].as_str().unwrap().to_owned();
    let second_id = second["key_id"].as_i64().unwrap();
    for _ in 0..3 {
        assert_eq!(
            app.call("/vedic/v1/horoscope/daily", &customer.api_key)
                .await
                .status(),
            200
        );
    }
    assert_eq!(
        app.call("/western/v1/chart/natal", &second_key)
            .await
            .status(),
        200
    );
    assert_eq!(
        app.call("/vedic/v1/status/503", &second_key).await.status(),
        503
    );
    app.wait_for_ledger(customer.account_id, 5).await;

    let (ledger_calls, ledger_units): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(cost), 0)::bigint FROM subscription_tracking WHERE account_id = $1",
    )
    .bind(customer.account_id)
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(ledger_calls, 5);

    let by_day: Value = get(&app, "/account/v1/analytics", &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(by_day["group_by"], "day");
    assert_eq!(sum(&by_day, "calls"), ledger_calls);
    assert_eq!(sum(&by_day, "units"), ledger_units);
    let today = Utc::now().date_naive().to_string();
    let today_row = rows(&by_day)
        .iter()
        .find(|r| r["day"] == today)
        .expect("today");
    assert_eq!(today_row["calls"], 5);
    assert_eq!(today_row["errors"], 1);

    let by_route: Value = get(&app, "/account/v1/analytics?group_by=route", &token)
        .await
        .json()
        .await
        .unwrap();
    let mut route_calls: Vec<(String, i64)> = rows(&by_route)
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap().to_owned(),
                r["calls"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        route_calls[0],
        ("/vedic/v1/horoscope".to_owned(), 3),
        "most calls first"
    );
    route_calls.sort();
    assert_eq!(
        route_calls,
        vec![
            ("/vedic/v1/horoscope".to_owned(), 3),
            ("/vedic/v1/status".to_owned(), 1),
            ("/western/v1/chart".to_owned(), 1),
        ]
    );
    assert_eq!(sum(&by_route, "calls"), ledger_calls);

    let by_key: Value = get(&app, "/account/v1/analytics?group_by=key", &token)
        .await
        .json()
        .await
        .unwrap();
    let per_key = |id: i64| {
        rows(&by_key)
            .iter()
            .find(|r| r["key_id"] == id)
            .map(|r| (r["calls"].as_i64().unwrap(), r["errors"].as_i64().unwrap()))
    };
    assert_eq!(per_key(customer.key_id), Some((3, 0)));
    assert_eq!(per_key(second_id), Some((2, 1)));

    // The key list's `used` is the rollup's month.
    let keys: Vec<Value> = get(&app, "/account/v1/keys", &token)
        .await
        .json()
        .await
        .unwrap();
    let used = |id: i64| keys.iter().find(|k| k["key_id"] == id).unwrap()["used"].clone();
    assert_eq!(used(customer.key_id), 3);
    assert_eq!(used(second_id), 2);

    // The operator reads the same.
    let admin: Value = app
        .admin_get(&format!(
            "/admin/v1/accounts/{}/analytics?group_by=key",
            customer.account_id
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(admin, by_key);
}

#[tokio::test]
async fn routes_past_the_bound_count_as_other() {
    let app = spawn_app_with(|c| c.analytics.max_routes = 2).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    for path in [
        "/vedic/v1/a/x",
        "/vedic/v1/b",
        "/vedic/v1/c",
        "/vedic/v1/d/y",
        "/vedic/v1/a/z",
    ] {
        assert_eq!(app.call(path, &customer.api_key).await.status(), 200);
    }
    app.wait_for_ledger(customer.account_id, 5).await;
    let report: Value = get(&app, "/account/v1/analytics?group_by=route", &token)
        .await
        .json()
        .await
        .unwrap();
    let mut routes: Vec<(String, i64)> = rows(&report)
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap().to_owned(),
                r["calls"].as_i64().unwrap(),
            )
        })
        .collect();
    routes.sort();
    assert_eq!(
        routes,
        vec![
            ("/vedic/v1/a".to_owned(), 2),
            ("/vedic/v1/b".to_owned(), 1),
            ("other".to_owned(), 2)
        ]
    );
}

#[tokio::test]
async fn a_range_past_93_days_or_a_bad_date_is_refused_and_other_accounts_are_not_found() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    for query in [
        "?from=2026-01-01&to=2026-04-04",
        "?from=2026-13-01",
        "?from=2026-12-07&to=2026-12-01",
        "?group_by=week",
    ] {
        assert_error(
            get(&app, &format!("/account/v1/analytics{query}"), &token).await,
            422,
            "VALIDATION_FAILED",
        )
        .await;
    }
    let res = get(
        &app,
        "/account/v1/analytics?from=2026-01-01&to=2026-04-03",
        &token,
    )
    .await;
    assert_eq!(res.status(), 200, "93 days are allowed");
    let report: Value = res.json().await.unwrap();
    assert_eq!(rows(&report).len(), 93);
    let res = app.admin_get("/admin/v1/accounts/999999/analytics").await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
    // Another account's calls never show in this account's report.
    let other = app.signup().await;
    assert_eq!(
        app.call("/vedic/v1/horoscope/daily", &other.api_key)
            .await
            .status(),
        200
    );
    app.wait_for_ledger(other.account_id, 1).await;
    let mine: Value = get(&app, "/account/v1/analytics", &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(sum(&mine, "calls"), 0);
    assert_eq!(mine["account_id"], customer.account_id);
}

/// A test upstream that sleeps a known time: the percentiles read back are within 5% of
/// the exact ones (the upstream latency adds the loopback's fraction of a millisecond).
#[tokio::test]
async fn latency_percentiles_are_within_five_percent_of_the_known_latencies() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    // Sleeps long enough that a busy machine's scheduling delay stays well under 5%;
    // one at a time, so no call waits for a connection.
    let mut slept: Vec<f64> = (0..30u64).map(|i| (200 + i * 10) as f64).collect();
    for ms in &slept {
        let path = format!("/vedic/v1/slow/{ms}");
        assert_eq!(app.call(&path, &customer.api_key).await.status(), 200);
    }
    app.wait_for_ledger(customer.account_id, 30).await;
    let report: Value = get(&app, "/account/v1/analytics?group_by=route", &token)
        .await
        .json()
        .await
        .unwrap();
    let row = &rows(&report)[0];
    assert_eq!(row["route"], "/vedic/v1/slow");
    slept.sort_by(f64::total_cmp);
    for (name, q) in [("p50", 0.50), ("p95", 0.95), ("p99", 0.99)] {
        let rank = ((q * slept.len() as f64).ceil() as usize).clamp(1, slept.len());
        let exact = slept[rank - 1];
        let read = row["latency_ms"][name].as_f64().unwrap();
        assert!(
            (read - exact).abs() / exact <= 0.05,
            "{name}: read {read} ms, exact {exact} ms"
        );
    }
}

#[tokio::test]
async fn calls_count_with_their_batch_and_latencies_follow_within_the_merge_interval() {
    let mut app = spawn_app_with(|c| c.analytics.latency_flush_ms = 3_600_000).await;
    let customer = app.signup().await;
    for _ in 0..3 {
        assert_eq!(
            app.call("/vedic/v1/horoscope/daily", &customer.api_key)
                .await
                .status(),
            200
        );
    }
    let rollup = |pool: sqlx::PgPool, account_id: i64| async move {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT coalesce(sum(calls), 0)::bigint,
                    coalesce(sum((SELECT coalesce(sum(x), 0) FROM unnest(latency) x)), 0)::bigint
             FROM usage_rollup WHERE account_id = $1",
        )
        .bind(account_id)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    // Counted at once, in the ledger's transaction; no latency merged yet (an hour away).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rollup(app.db.pool.clone(), customer.account_id).await.0 < 3 {
        assert!(std::time::Instant::now() < deadline, "never counted");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        rollup(app.db.pool.clone(), customer.account_id).await,
        (3, 0)
    );
    // A gateway that stops merges what it holds first.
    app.stop().await;
    assert_eq!(
        rollup(app.db.pool.clone(), customer.account_id).await,
        (3, 3)
    );
}
