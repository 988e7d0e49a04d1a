//! Every activation path — a redeemed code, a checkout, a paid invoice — restores an
//! exhausted account at once: its usage object has units again, its marker is gone
//! and its calls are admitted on the very next try.

use super::*;
use crate::common::*;

/// An account whose free grant of one call is used up and marked, with admission 0%
/// so a marked account's calls are all refused.
async fn exhausted_account(app: &TestApp) -> Customer {
    let customer = app.signup().await;
    let id = customer.account_id;
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    app.wait_for_ledger(id, 1).await;
    let marked = eventually(Duration::from_secs(10), || {
        std::future::ready(app.state.throttler.is_marked(id, Utc::now()))
    })
    .await;
    assert!(marked, "exhaustion marker written");
    assert_eq!(app.usage_of(id).await["exhausted"], true);
    assert_error(
        app.call(DAILY, &customer.api_key).await,
        429,
        "REQUEST_THROTTLED",
    )
    .await;
    customer
}

async fn exhausted_app() -> TestApp {
    spawn_app_with(|c| {
        with_catalogue(c);
        c.usage.free_monthly_calls = 1;
        c.throttle.admission_percent = 0;
    })
    .await
}

/// Right after the activation answered: units again, no marker, calls admitted.
async fn assert_restored(app: &TestApp, customer: &Customer, plan: &str) {
    let id = customer.account_id;
    let usage = app.usage_of(id).await;
    assert_eq!(
        (&usage["plan"], &usage["exhausted"]),
        (&json!(plan), &json!(false)),
        "{usage}"
    );
    assert!(
        !app.state.throttler.is_marked(id, Utc::now()),
        "marker removed"
    );
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
}

#[tokio::test]
async fn a_redeemed_code_restores_an_exhausted_account_at_once() {
    let app = exhausted_app().await;
    let customer = exhausted_account(&app).await;
    let session = app.login(&customer).await;
    let res = app
        .admin_post(
            "/admin/v1/codes",
            &json!({"plan": "pro", "months": 1, "count": 1}),
        )
        .await;
    let code = res.json::<Value>().await.unwrap()["codes"][0].clone();
    let res = app
        .client
        .post(app.url("/account/v1/redeem"))
        .bearer_auth(&session)
        .json(&json!({"code": code}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    assert_restored(&app, &customer, "pro").await;
}

#[tokio::test]
async fn a_checkout_restores_an_exhausted_account_at_once() {
    let app = exhausted_app().await;
    let customer = exhausted_account(&app).await;
    let id = customer.account_id.to_string();
    let outcome = app
        .send_event(&checkout("evt_r1", &id, "pro", "cus_R"))
        .await;
    assert_eq!(outcome, "activated");
    assert_restored(&app, &customer, "pro").await;
}

#[tokio::test]
async fn a_paid_invoice_restores_an_exhausted_account_at_once() {
    let app = exhausted_app().await;
    let customer = exhausted_account(&app).await;
    // The customer is known from an earlier checkout of a plan no longer offered.
    let id = customer.account_id.to_string();
    let mapped = app
        .send_event(&checkout("evt_r2", &id, "retired", "cus_S"))
        .await;
    assert_eq!(mapped, "unknown_plan");
    let now = Utc::now().timestamp();
    let outcome = app
        .send_event(&invoice_paid(
            "evt_r3",
            "cus_S",
            "price_pro",
            now - 60,
            now + 86_400,
        ))
        .await;
    assert_eq!(outcome, "activated");
    assert_restored(&app, &customer, "pro").await;
}
