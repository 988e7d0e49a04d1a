//! Plans customers see and operators shape (SPEC §3.1.6, §3.3, §3.4, §6): quota
//! headers, priced calls, daily windows, hard limits across replicas, top-ups, and the
//! operators' reads.

mod common;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tollgate::config::{Config, RoutePrice};
use tollgate::month::{Day, Month};

const DAILY: &str = "/vedic/v1/horoscope/daily";

async fn subscribe(app: &TestApp, account_id: i64, body: Value) {
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{account_id}/subscriptions"),
            &body,
        )
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
}

/// The usage object once `used` has reached `expected` (accounting is asynchronous).
async fn used(app: &TestApp, account_id: i64, expected: i64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let usage = app.usage_of(account_id).await;
        if usage["used"] == expected {
            return usage;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "used never reached {expected}: {usage}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn header(res: &reqwest::Response, name: &str) -> String {
    res.headers()
        .get(name)
        .unwrap_or_else(|| panic!("{name} missing"))
        .to_str()
        .unwrap()
        .to_owned()
}

fn month_seconds() -> i64 {
    let month = Month::containing(Utc::now());
    (month.end() - month.start()).num_seconds()
}

/// `"monthly";r=<r>;t=<t>` → (r, t).
fn monthly_item(value: &str) -> (i64, i64) {
    let item = value.split(", ").next().unwrap();
    let mut r = None;
    let mut t = None;
    for param in item.split(';').skip(1) {
        let (k, v) = param.split_once('=').unwrap();
        match k {
            "r" => r = v.parse().ok(),
            "t" => t = v.parse().ok(),
            _ => {}
        }
    }
    (r.unwrap(), t.unwrap())
}

#[tokio::test]
async fn every_proxied_answer_carries_the_quota_headers_in_the_drafts_syntax() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app.call(DAILY, &customer.api_key).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        format!("\"monthly\";q=3000;w={}", month_seconds())
    );
    let (remaining, reset) = monthly_item(&header(&res, "ratelimit"));
    assert_eq!(remaining, 3000);
    let to_end = (Month::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!(
        (to_end..=to_end + 2).contains(&reset),
        "t={reset}, {to_end}"
    );

    // An upstream error status is an answer too.
    let res = app.call("/vedic/v1/status/503", &customer.api_key).await;
    assert_eq!(res.status(), 503);
    assert!(res.headers().contains_key("ratelimit"));

    // Figures follow the accounting.
    used(&app, customer.account_id, 2).await;
    let res = app.call(DAILY, &customer.api_key).await;
    assert_eq!(monthly_item(&header(&res, "ratelimit")).0, 2998);
}

#[tokio::test]
async fn a_daily_plan_adds_daily_items_and_the_usage_object_reports_the_day() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    subscribe(
        &app,
        customer.account_id,
        json!({"plan": "pro", "monthly_allowance": 1000, "daily_allowance": 10}),
    )
    .await;
    let res = app.call(DAILY, &customer.api_key).await;
    let policy = header(&res, "ratelimit-policy");
    assert_eq!(
        policy,
        format!(
            "\"monthly\";q=1000;w={}, \"daily\";q=10;w=86400",
            month_seconds()
        )
    );
    let usage = used(&app, customer.account_id, 1).await;
    let day = Day::containing(Utc::now());
    assert_eq!(
        usage["daily"],
        json!({"day_start": day.start(), "allowance": 10, "used": 1, "remaining": 9})
    );
    assert_eq!(usage["enforcement"], "soft");
    assert_eq!(usage["credits"], 0);
}

#[tokio::test]
async fn priced_routes_and_the_upstreams_cost_header_set_what_a_call_uses() {
    let app = spawn_app_with(|c: &mut Config| {
        c.pricing.routes = vec![RoutePrice {
            prefix: "/vedic/v1/kundli".into(),
            cost: 5,
        }];
        c.pricing.cost_header = Some("x-call-cost".into());
    })
    .await;
    let customer = app.signup().await;
    assert_eq!(
        app.call("/vedic/v1/kundli/full", &customer.api_key)
            .await
            .status(),
        200
    );
    used(&app, customer.account_id, 5).await;

    let res = app.call("/vedic/v1/cost/7", &customer.api_key).await;
    assert_eq!(res.status(), 200);
    assert!(
        !res.headers().contains_key("x-call-cost"),
        "the cost header never reaches the client"
    );
    used(&app, customer.account_id, 12).await;
    let costs: Vec<i64> = sqlx::query_scalar(
        "SELECT cost FROM subscription_tracking WHERE account_id = $1 ORDER BY occurred_at",
    )
    .bind(customer.account_id)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(costs, vec![5, 7]);

    // A value that is not a cost is ignored: the route's price (1) counts.
    assert_eq!(
        app.call("/vedic/v1/cost/lots", &customer.api_key)
            .await
            .status(),
        200
    );
    used(&app, customer.account_id, 13).await;
}

#[tokio::test]
async fn a_hard_plan_refuses_past_its_allowance_and_never_forwards() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    subscribe(
        &app,
        customer.account_id,
        json!({"plan": "metered", "monthly_allowance": 5, "enforcement": "hard"}),
    )
    .await;
    for _ in 0..5 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    let res = app.call(DAILY, &customer.api_key).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = header(&res, "retry-after").parse().unwrap();
    let to_end = (Month::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!(
        (to_end..=to_end + 2).contains(&retry),
        "{retry} vs {to_end}"
    );
    assert!(res.headers().contains_key("ratelimit"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code": "QUOTA_EXCEEDED", "message": "Quota exceeded for this period."})
    );
    assert_eq!(app.upstream.recorded().len(), 5);
    let usage = used(&app, customer.account_id, 5).await;
    assert_eq!(usage["enforcement"], "hard");
    assert_eq!(usage["exhausted"], true);
}

#[tokio::test]
async fn a_hard_daily_window_refuses_until_the_days_end() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    subscribe(
        &app,
        customer.account_id,
        json!({"plan": "daily", "monthly_allowance": 100, "daily_allowance": 2,
               "enforcement": "hard"}),
    )
    .await;
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    let res = app.call(DAILY, &customer.api_key).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = header(&res, "retry-after").parse().unwrap();
    let to_day_end = (Day::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!((to_day_end..=to_day_end + 2).contains(&retry), "{retry}");
    assert_eq!(app.upstream.recorded().len(), 2);
}

#[tokio::test]
async fn three_replicas_racing_for_the_last_units_of_a_hard_plan_never_overshoot() {
    const ALLOWANCE: i64 = 60;
    let first = spawn_app().await;
    let customer = first.signup().await;
    subscribe(
        &first,
        customer.account_id,
        json!({"plan": "hard", "monthly_allowance": ALLOWANCE, "enforcement": "hard"}),
    )
    .await;
    let mut replicas = vec![Arc::new(first)];
    for _ in 0..2 {
        let config = test_config(&replicas[0].db, &replicas[0].upstream);
        replicas.push(Arc::new(
            spawn_replica(replicas[0].db.clone(), replicas[0].upstream.clone(), config).await,
        ));
    }
    let mut calls = Vec::new();
    for i in 0..300 {
        let app = replicas[i % 3].clone();
        let key = customer.api_key.clone();
        calls.push(tokio::spawn(
            async move { app.call(DAILY, &key).await.status() },
        ));
    }
    let mut forwarded = 0;
    let mut refused = 0;
    for call in calls {
        match call.await.unwrap() {
            StatusCode::OK => forwarded += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    let received = replicas[0].upstream.recorded().len() as i64;
    println!(
        "hard plan of {ALLOWANCE} over 3 replicas, 300 calls: {forwarded} forwarded, \
         {refused} refused, upstream received {received}"
    );
    assert_eq!(received, forwarded);
    assert!(received <= ALLOWANCE, "overshoot: {received} > {ALLOWANCE}");
    // Blocks shrink as the allowance runs out, so the last units are not stranded.
    assert!(received >= ALLOWANCE - 3, "units left stranded: {received}");
    replicas[0]
        .wait_for_ledger(customer.account_id, received)
        .await;
}

#[tokio::test]
async fn credit_pays_once_the_allowance_is_used_up_and_only_once() {
    let app = spawn_app_with(|c| c.usage.free_monthly_calls = 2).await;
    let customer = app.signup().await;
    for _ in 0..2 {
        app.call(DAILY, &customer.api_key).await;
    }
    assert_eq!(used(&app, customer.account_id, 2).await["exhausted"], true);

    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/grants", customer.account_id),
            &json!({"calls": 3, "expires_at": null}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let grant: Value = res.json().await.unwrap();
    assert_eq!(grant["calls"], 3);
    assert!(grant["grant_id"].is_i64());
    let usage = app.usage_of(customer.account_id).await;
    assert_eq!(
        (
            usage["remaining"].as_i64(),
            usage["credits"].as_i64(),
            usage["exhausted"].as_bool()
        ),
        (Some(3), Some(3), Some(false))
    );

    for _ in 0..2 {
        app.call(DAILY, &customer.api_key).await;
    }
    let usage = used(&app, customer.account_id, 4).await;
    assert_eq!(usage["credits"], 1);
    assert_eq!(usage["remaining"], 1);

    // A redelivered event spends nothing.
    let accountant = app.accountant.clone().expect("metering on");
    let ledger: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT transaction_id FROM subscription_tracking WHERE account_id = $1",
    )
    .bind(customer.account_id)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    let again = tollgate::usage::UsageEvent {
        transaction_id: ledger[3],
        account_id: customer.account_id,
        key_id: customer.key_id,
        occurred_at: Utc::now(),
        method: axum::http::Method::GET,
        route: DAILY.into(),
        upstream_status: 200,
        cost: 1,
        reserved_by: None,
    };
    let outcome = accountant.account(&[again], Utc::now()).await.unwrap();
    assert_eq!(outcome.duplicates, 1);
    assert_eq!(app.usage_of(customer.account_id).await["credits"], 1);
}

#[tokio::test]
async fn a_priced_call_crossing_the_allowance_spends_only_its_excess_from_credit() {
    let app = spawn_app_with(|c| {
        c.usage.free_monthly_calls = 10;
        c.pricing.cost_header = Some("x-call-cost".into());
    })
    .await;
    let customer = app.signup().await;
    app.admin_post(
        &format!("/admin/v1/accounts/{}/grants", customer.account_id),
        &json!({"calls": 20, "expires_at": "2999-01-01T00:00:00Z"}),
    )
    .await;
    app.call("/vedic/v1/cost/8", &customer.api_key).await;
    used(&app, customer.account_id, 8).await;
    app.call("/vedic/v1/cost/5", &customer.api_key).await;
    let usage = used(&app, customer.account_id, 13).await;
    assert_eq!(usage["credits"], 17, "3 units beyond the allowance of 10");
    assert_eq!(usage["remaining"], 17);
}

#[tokio::test]
async fn operators_list_accounts_and_read_a_month_day_by_day() {
    let app = spawn_app_with(|c| c.usage.free_monthly_calls = 1).await;
    let quiet = app.signup().await;
    let busy = app.signup().await;
    for _ in 0..2 {
        app.call(DAILY, &busy.api_key).await;
    }
    used(&app, busy.account_id, 2).await;

    let list: Value = app
        .admin_get("/admin/v1/accounts?limit=1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["accounts"].as_array().unwrap().len(), 1);
    assert_eq!(list["accounts"][0]["account_id"], quiet.account_id);
    let cursor = list["next_cursor"].as_str().unwrap().to_owned();
    let next: Value = app
        .admin_get(&format!("/admin/v1/accounts?limit=1&cursor={cursor}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(next["accounts"][0]["account_id"], busy.account_id);
    assert_eq!(next["next_cursor"], Value::Null);

    let exhausted: Value = app
        .admin_get("/admin/v1/accounts?exhausted=true")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        exhausted["accounts"],
        json!([{"account_id": busy.account_id, "email": busy.email, "plan": "free",
                "used": 2, "allowance": 1, "exhausted": true}])
    );
    let by_email: Value = app
        .admin_get(&format!("/admin/v1/accounts?q={}", &quiet.email[..8]))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(by_email["accounts"][0]["account_id"], quiet.account_id);

    let daily: Value = app
        .admin_get(&format!(
            "/admin/v1/accounts/{}/usage/daily",
            busy.account_id
        ))
        .await
        .json()
        .await
        .unwrap();
    let days = daily["days"].as_array().unwrap();
    let today: DateTime<Utc> = Utc::now();
    assert_eq!(days.len() as u32, chrono::Datelike::day(&today));
    assert_eq!(
        days.last().unwrap(),
        &json!({"day": today.date_naive().to_string(), "calls": 2, "cost": 2})
    );
    assert_eq!(
        app.admin_get("/admin/v1/accounts?limit=201").await.status(),
        422
    );
}

#[tokio::test]
async fn migrating_a_database_of_the_previous_schema_keeps_every_meaning() {
    let db = TestDb::migrated_to(Some(6)).await;
    let pool = &db.pool;
    let account: i64 = sqlx::query_scalar(
        "INSERT INTO account (email, password_hash) VALUES ('old@example.com', 'x') RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
         VALUES ($1, 'pro', now() - interval '1 day', 500)",
    )
    .bind(account)
    .execute(pool)
    .await
    .unwrap();
    for _ in 0..3 {
        sqlx::query(
            "INSERT INTO subscription_tracking
                 (transaction_id, account_id, key_id, occurred_at, method, route, upstream_status)
             VALUES (gen_random_uuid(), $1, 1, now(), 'GET', '/vedic/v1/x', 200)",
        )
        .bind(account)
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO usage_counter (account_id, month_start, used)
         VALUES ($1, date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 3)",
    )
    .bind(account)
    .execute(pool)
    .await
    .unwrap();

    tollgate::db::migrate_to(&secrecy::SecretString::from(db.url.clone()), None)
        .await
        .unwrap();
    let (daily, enforcement): (Option<i64>, String) =
        sqlx::query_as("SELECT daily_allowance, enforcement FROM subscription WHERE plan = 'pro'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!((daily, enforcement.as_str()), (None, "soft"));
    let costs: Vec<i64> = sqlx::query_scalar("SELECT cost FROM subscription_tracking")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(costs, vec![1, 1, 1]);
    let (calls, units): (i64, i64) =
        sqlx::query_as("SELECT calls, used FROM usage_daily WHERE account_id = $1")
            .bind(account)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!((calls, units), (3, 3));
    let report = tollgate::usage::report::usage_report(
        &mut pool.acquire().await.unwrap(),
        account,
        Month::containing(Utc::now()),
        Utc::now(),
        3000,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (
            report.plan.as_str(),
            report.allowance,
            report.used,
            report.remaining
        ),
        ("pro", 500, 3, 497)
    );
}

#[tokio::test]
async fn a_used_up_day_of_a_soft_plan_is_marked_and_throttled_by_the_hash() {
    let kv = tollgate_testkit::fake_kv::FakeKv::start().await;
    let app = spawn_app_with(|c| use_kv(c, &kv)).await;
    let customer = app.signup().await;
    subscribe(
        &app,
        customer.account_id,
        json!({"plan": "pro", "monthly_allowance": 1000, "daily_allowance": 3}),
    )
    .await;
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    used(&app, customer.account_id, 3).await;
    let day = Day::containing(Utc::now());
    let key = format!(
        "usage-exhausted-daily:{}:{}",
        customer.account_id,
        day.start_unix()
    );
    let written = eventually(Duration::from_secs(10), || async {
        kv.value(&key).is_some()
    })
    .await;
    assert!(written, "daily marker {key} written");
    let expiration = kv
        .value(&key)
        .and_then(|(_, e)| e)
        .expect("the marker expires");
    assert!(expiration >= day.end().timestamp());

    let mut throttled = 0;
    for _ in 0..50 {
        let res = app.call(DAILY, &customer.api_key).await;
        if res.status() == StatusCode::TOO_MANY_REQUESTS {
            throttled += 1;
            assert_eq!(header(&res, "retry-after"), "1");
            assert!(header(&res, "ratelimit").contains("\"daily\";r=0"));
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["code"], "REQUEST_THROTTLED");
        }
    }
    assert!((25..50).contains(&throttled), "{throttled} of 50 throttled");
}

#[tokio::test]
async fn an_upgrade_mid_day_lifts_a_hard_daily_limit_at_once() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let plan = |daily: i64| {
        json!({"plan": "daily", "monthly_allowance": 100, "daily_allowance": daily,
               "enforcement": "hard"})
    };
    subscribe(&app, customer.account_id, plan(1)).await;
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 429);
    subscribe(&app, customer.account_id, plan(3)).await;
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 429);
    assert_eq!(app.upstream.recorded().len(), 3);
}
