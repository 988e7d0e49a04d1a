//! Redemption codes: operators mint them for a catalogue plan, customers redeem each
//! one once, and failed attempts are limited.

use super::*;
use crate::common::*;

/// Mints `count` codes of `plan` for `months`; returns them.
async fn mint(app: &TestApp, plan: &str, months: i64, count: i64) -> Vec<String> {
    let res = app
        .admin_post(
            "/admin/v1/codes",
            &json!({"plan": plan, "months": months, "count": count, "expires_at": null}),
        )
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        (&body["plan"], &body["months"]),
        (&json!(plan), &json!(months))
    );
    body["codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect()
}

async fn redeem(app: &TestApp, session: &str, code: &str) -> reqwest::Response {
    app.client
        .post(app.url("/account/v1/redeem"))
        .bearer_auth(session)
        .json(&json!({"code": code}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_operator_mints_codes_that_are_shown_once_and_stored_hashed() {
    let app = billing_app().await;
    let codes = mint(&app, "team", 3, 5).await;
    assert_eq!(codes.len(), 5);
    let distinct: std::collections::HashSet<_> = codes.iter().collect();
    assert_eq!(distinct.len(), 5);
    for code in &codes {
        assert!(code.starts_with("tgr_") && code.len() == 44, "{code}");
    }
    let stored: Vec<Vec<u8>> = sqlx::query_scalar("SELECT code_hash FROM redemption_code")
        .fetch_all(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 5);
    let hashed: Vec<u8> = <sha2::Sha256 as sha2::Digest>::digest(codes[0].as_bytes()).to_vec();
    assert!(stored.contains(&hashed));
    assert!(!stored.iter().any(|h| h.as_slice() == codes[0].as_bytes()));
}

#[tokio::test]
async fn minting_needs_a_catalogue_plan_and_sane_figures() {
    let app = billing_app().await;
    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    for body in [
        json!({"plan": "bespoke", "months": 1, "count": 1}),
        json!({"plan": "pro", "months": 0, "count": 1}),
        json!({"plan": "pro", "months": 1, "count": 0}),
        json!({"plan": "pro", "months": 1, "count": 1001}),
        json!({"plan": "pro", "months": 1, "count": 1, "expires_at": past}),
    ] {
        let res = app.admin_post("/admin/v1/codes", &body).await;
        assert_error(res, 422, "VALIDATION_FAILED").await;
    }
    let res = app
        .client
        .post(app.url("/admin/v1/codes"))
        .json(&json!({"plan": "pro", "months": 1, "count": 1}))
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
    assert_eq!(mint(&app, "pro", 1, 1000).await.len(), 1000);
}

#[tokio::test]
async fn a_customer_redeems_a_code_for_calendar_months_of_its_plan() {
    let app = billing_app().await;
    let customer = app.signup().await;
    let session = app.login(&customer).await;
    let code = mint(&app, "team", 2, 1).await.remove(0);
    let before = Utc::now();
    let res = redeem(&app, &session, &code).await;
    assert_eq!(res.status(), 201);
    let sub: Value = res.json().await.unwrap();
    assert!(sub["subscription_id"].is_i64(), "{sub}");
    assert_eq!(
        (&sub["account_id"], &sub["plan"], &sub["monthly_allowance"]),
        (&json!(customer.account_id), &json!("team"), &json!(50_000))
    );
    assert_eq!(
        (&sub["daily_allowance"], &sub["enforcement"]),
        (&json!(5_000), &json!("hard"))
    );
    let starts: DateTime<Utc> = sub["starts_at"].as_str().unwrap().parse().unwrap();
    let expires: DateTime<Utc> = sub["expires_at"].as_str().unwrap().parse().unwrap();
    assert!(starts >= before && starts <= Utc::now());
    assert_eq!(
        expires,
        starts.checked_add_months(chrono::Months::new(2)).unwrap()
    );
    let usage = app.usage_of(customer.account_id).await;
    assert_eq!(
        (&usage["plan"], &usage["allowance"]),
        (&json!("team"), &json!(50_000))
    );

    let res = redeem(&app, &session, &code).await;
    assert_error(res, 409, "CODE_USED").await;
}

#[tokio::test]
async fn a_code_redeemed_twice_at_once_is_granted_exactly_once() {
    let app = billing_app().await;
    let (ann, bob) = (app.signup().await, app.signup().await);
    let (ann_session, bob_session) = (app.login(&ann).await, app.login(&bob).await);
    let code = mint(&app, "pro", 1, 1).await.remove(0);
    let (a, b) = tokio::join!(
        redeem(&app, &ann_session, &code),
        redeem(&app, &bob_session, &code)
    );
    let mut statuses = [a.status().as_u16(), b.status().as_u16()];
    statuses.sort();
    assert_eq!(statuses, [201, 409]);
    let loser = if a.status() == 409 { a } else { b };
    assert_error(loser, 409, "CODE_USED").await;
    let granted: i64 = sqlx::query_scalar("SELECT count(*) FROM subscription WHERE plan = 'pro'")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(granted, 1);
}

#[tokio::test]
async fn an_expired_code_is_gone_and_an_unknown_one_not_found() {
    let app = billing_app().await;
    let customer = app.signup().await;
    let session = app.login(&customer).await;
    let code = mint(&app, "pro", 1, 1).await.remove(0);
    sqlx::query("UPDATE redemption_code SET expires_at = now() - interval '1 second'")
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_error(redeem(&app, &session, &code).await, 410, "CODE_EXPIRED").await;
    let unknown = format!("tgr_{}", "x".repeat(40));
    assert_error(
        redeem(&app, &session, &unknown).await,
        404,
        "CODE_NOT_FOUND",
    )
    .await;
    assert_error(
        redeem(&app, &session, "not a code").await,
        404,
        "CODE_NOT_FOUND",
    )
    .await;
    assert!(app.paid_subscriptions(customer.account_id).await.is_empty());

    let res = app
        .client
        .post(app.url("/account/v1/redeem"))
        .json(&json!({"code": code}))
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn past_the_failure_limit_even_a_good_code_waits() {
    let app = spawn_app_with(|c| {
        with_catalogue(c);
        c.account.login_failures_per_hour = 2;
    })
    .await;
    let customer = app.signup().await;
    let session = app.login(&customer).await;
    let good = mint(&app, "pro", 1, 1).await.remove(0);
    let wrong = format!("tgr_{}", "y".repeat(40));
    for _ in 0..2 {
        assert_error(redeem(&app, &session, &wrong).await, 404, "CODE_NOT_FOUND").await;
    }
    let res = redeem(&app, &session, &good).await;
    let retry_after: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=1800).contains(&retry_after), "{retry_after}");
    assert_error(res, 429, "TOO_MANY_REQUESTS").await;
    assert!(app.paid_subscriptions(customer.account_id).await.is_empty());

    // The limit counts per client address as well: another account from here waits too.
    let other = app.signup().await;
    let other_session = app.login(&other).await;
    assert_error(
        redeem(&app, &other_session, &good).await,
        429,
        "TOO_MANY_REQUESTS",
    )
    .await;
}
