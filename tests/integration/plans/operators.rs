//! The operators' reads, and the migration that brought plans in.

use super::*;
use crate::common::*;

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
