//! The plan catalogue: listed to anyone, and granted by operators by name alone.

use super::*;
use crate::common::*;

#[tokio::test]
async fn the_catalogue_is_listed_to_anyone_without_price_ids() {
    let app = billing_app().await;
    let res = app
        .client
        .get(app.url("/account/v1/plans"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let plans: Value = res.json().await.unwrap();
    assert_eq!(
        plans,
        json!([
            {"name": "pro", "monthly_allowance": 10_000, "daily_allowance": null,
             "enforcement": "soft", "features": [], "rate_limit": null,
             "minute_allowance": null, "unit_price_micros": null,
             "spend_cap_day_micros": null, "spend_cap_month_micros": null},
            {"name": "team", "monthly_allowance": 50_000, "daily_allowance": 5_000,
             "enforcement": "hard", "features": [], "rate_limit": null,
             "minute_allowance": null, "unit_price_micros": null,
             "spend_cap_day_micros": null, "spend_cap_month_micros": null},
        ])
    );
}

#[tokio::test]
async fn an_empty_catalogue_lists_no_plans() {
    let app = spawn_app().await;
    let plans: Value = app
        .client
        .get(app.url("/account/v1/plans"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(plans, json!([]));
}

#[tokio::test]
async fn an_operator_grants_a_catalogue_plan_by_name_alone() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    let res = app.admin_post(&path, &json!({"plan": "team"})).await;
    assert_eq!(res.status(), 201);
    let sub: Value = res.json().await.unwrap();
    assert_eq!(
        (
            &sub["plan"],
            &sub["monthly_allowance"],
            &sub["daily_allowance"],
            &sub["enforcement"]
        ),
        (
            &json!("team"),
            &json!(50_000),
            &json!(5_000),
            &json!("hard")
        )
    );
    let usage = app.usage_of(id).await;
    assert_eq!(
        (&usage["plan"], &usage["allowance"]),
        (&json!("team"), &json!(50_000))
    );
    assert_eq!(usage["daily"]["allowance"], 5_000);

    // Figures given explicitly still win over the catalogue's.
    let res = app
        .admin_post(&path, &json!({"plan": "pro", "monthly_allowance": 7}))
        .await;
    assert_eq!(res.status(), 201);
    let sub: Value = res.json().await.unwrap();
    assert_eq!(
        (&sub["monthly_allowance"], &sub["enforcement"]),
        (&json!(7), &json!("soft"))
    );
}

#[tokio::test]
async fn a_free_text_plan_still_needs_its_monthly_allowance() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let path = format!("/admin/v1/accounts/{id}/subscriptions");
    let res = app.admin_post(&path, &json!({"plan": "bespoke"})).await;
    assert_error(res, 422, "VALIDATION_FAILED").await;
    let res = app
        .admin_post(&path, &json!({"plan": "bespoke", "monthly_allowance": 123}))
        .await;
    assert_eq!(res.status(), 201);
}
