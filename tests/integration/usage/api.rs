//! The usage and subscription HTTP API: reading usage by session or key, the usage
//! object, and what malformed or unauthorised requests get back.

use serde_json::json;

use super::*;
use crate::common::*;

#[tokio::test]
async fn a_customer_reads_usage_with_a_session_or_an_api_key() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let (id, pool) = (customer.account_id, &app.db.pool);
    let current = Month::containing(Utc::now()).to_string();
    let sql = "SELECT id FROM subscription WHERE account_id = $1";
    let free: i64 = scalar(pool, sql, id).await;
    let signup_grant = snapshots(pool, id, ALL).await;
    assert_eq!(signup_grant, [snap(free, &current, FREE, true)]);
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    app.wait_for_ledger(id, 2).await;

    let usage = app.url("/account/v1/usage");
    let token = app.login(&customer).await;
    let by_session = app.client.get(&usage).bearer_auth(&token).send().await;
    let by_session = by_session.unwrap();
    assert_eq!(by_session.status(), 200);
    let by_session: Value = by_session.json().await.unwrap();
    assert_eq!(by_session["account_id"], id);
    assert_eq!(usage_json(&by_session), "free: 2 of 3000 used, 2998 left");
    let by_key = app
        .client
        .get(&usage)
        .header("x-api-key", &customer.api_key);
    let by_key = by_key.send().await.unwrap();
    assert_eq!(by_key.status(), 200);
    assert_eq!(by_key.json::<Value>().await.unwrap(), by_session);

    let res = app.client.get(&usage).send().await.unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
    let res = app
        .client
        .get(&usage)
        .bearer_auth("not-a-session")
        .send()
        .await;
    assert_error(res.unwrap(), 401, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn the_usage_object_describes_a_utc_month_of_history() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let id = customer.account_id;
    let listener = app.accountant.clone().expect("metering on");
    let september = events(id, at("2026-09-30T23:59:59.999Z"), 2);
    let later = at("2026-10-05T00:00:00Z");
    listener.account(&september, later).await.unwrap();
    set_counter(&app.db.pool, id, "2026-08", 3_500).await;
    let get = async |month: &str| -> Value {
        let url = app.url(&format!("/account/v1/usage?month={month}"));
        let req = app.client.get(url).header("x-api-key", &customer.api_key);
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    };

    let sept = get("2026-09").await;
    let mut keys: Vec<&str> = sept
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    let fields = [
        "account_id",
        "allowance",
        "credits",
        "daily",
        "enforcement",
        "exhausted",
        "month_end",
        "month_start",
    ];
    assert_eq!(
        keys,
        [&fields[..], &["plan", "remaining", "spent_micros", "used"]].concat()
    );
    assert_eq!(sept["month_start"], "2026-09-01T00:00:00Z");
    assert_eq!(sept["month_end"], "2026-10-01T00:00:00Z");
    assert_eq!(usage_json(&sept), "free: 2 of 3000 used, 2998 left");
    let path = format!("/admin/v1/accounts/{id}/usage?month=2026-09");
    let by_admin = app.admin_get(&path).await;
    assert_eq!(by_admin.json::<Value>().await.unwrap(), sept);

    let december = get("2026-12").await;
    assert_eq!(december["month_start"], "2026-12-01T00:00:00Z");
    assert_eq!(december["month_end"], "2027-01-01T00:00:00Z");
    let over = usage_json(&get("2026-08").await);
    assert_eq!(over, "free: 3500 of 3000 used, 0 left, exhausted");
    assert_eq!(get("2026-10").await["used"], 0);
}

#[tokio::test]
async fn a_malformed_month_is_refused_with_validation_failed() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let id = customer.account_id;
    for bad in [
        "2026-13", "2026-00", "2026-1", "26-01", "2026/01", "november", "9999-12", "0000-06",
    ] {
        let url = app.url(&format!("/account/v1/usage?month={bad}"));
        let req = app.client.get(url).header("x-api-key", &customer.api_key);
        assert_error(req.send().await.unwrap(), 422, "VALIDATION_FAILED").await;
        let path = format!("/admin/v1/accounts/{id}/usage?month={bad}");
        assert_error(app.admin_get(&path).await, 422, "VALIDATION_FAILED").await;
    }
}

#[tokio::test]
async fn usage_and_subscriptions_of_an_unknown_account_are_not_found() {
    let app = spawn_app().await;
    let res = app.admin_get("/admin/v1/accounts/987654/usage").await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
    let body = json!({"plan": "pro", "monthly_allowance": 10_000});
    let res = app
        .admin_post("/admin/v1/accounts/987654/subscriptions", &body)
        .await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
}

#[tokio::test]
async fn invalid_subscription_requests_are_refused_with_json_errors() {
    let app = spawn_app().await;
    let id = app.signup().await.account_id;
    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    let (start, earlier) = ("2026-12-01T00:00:00Z", "2026-11-01T00:00:00Z");
    for body in [
        json!({"plan": "free", "monthly_allowance": 10}),
        json!({"plan": "FREE", "monthly_allowance": 10}),
        json!({"plan": " ", "monthly_allowance": 10}),
        json!({"plan": "pro", "monthly_allowance": -1}),
        json!({"plan": "pro", "monthly_allowance": 10, "starts_at": start, "expires_at": earlier}),
        json!({"plan": "pro", "monthly_allowance": 10, "starts_at": start, "expires_at": start}),
        json!({"plan": "pro", "monthly_allowance": 10, "starts_at": "yesterday"}),
        json!({"plan": "pro"}),
        json!({"plan": "pro", "monthly_allowance": 10, "discount": 5}),
    ] {
        let res = app.admin_post(&path, &body).await;
        assert_eq!(res.status(), 422, "{body}");
        assert_error(res, 422, "VALIDATION_FAILED").await;
    }
    let req = app.client.post(app.url(&path)).bearer_auth(ADMIN_TOKEN);
    let req = req
        .header("content-type", "application/json")
        .body("{\"plan\": ");
    assert_error(req.send().await.unwrap(), 400, "MALFORMED_JSON").await;

    let sql = "SELECT count(*) FROM subscription WHERE account_id = $1";
    let subscriptions: i64 = scalar(&app.db.pool, sql, id).await;
    assert_eq!(subscriptions, 1, "only the free one");
}

#[tokio::test]
async fn admin_routes_require_the_admin_token() {
    let app = spawn_app().await;
    let id = app.signup().await.account_id;
    let body = json!({"plan": "pro", "monthly_allowance": 10_000});
    let usage = app.url(&format!("/admin/v1/accounts/{id}/usage"));
    let subscriptions = app.url(&format!("/admin/v1/accounts/{id}/subscriptions"));
    let reconcile = app.url("/admin/v1/reconcile");
    for token in [None, Some("wrong-token")] {
        for req in [
            app.client.get(&usage),
            app.client.post(&subscriptions).json(&body),
            app.client.post(&reconcile),
        ] {
            let req = match token {
                Some(t) => req.bearer_auth(t),
                None => req,
            };
            assert_error(req.send().await.unwrap(), 401, "UNAUTHORIZED").await;
        }
    }
    let sql = "SELECT count(*) FROM subscription WHERE account_id = $1";
    let subscriptions: i64 = scalar(&app.db.pool, sql, id).await;
    assert_eq!(subscriptions, 1, "no subscription added");
}
