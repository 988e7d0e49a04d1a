//! Features per plan (SPEC §17): a route listed in `entitlements.routes` needs its
//! feature in the account's active subscription.

use tollgate::config::{FeatureRoute, PlanConfig};

use super::*;
use crate::common::*;

fn with_synastry_plan(c: &mut tollgate::config::Config) {
    c.entitlements.routes = vec![FeatureRoute {
        prefix: "/western/v1/synastry/".into(),
        feature: "synastry".into(),
    }];
    c.plans = vec![PlanConfig {
        name: "pro".into(),
        monthly_allowance: 10_000,
        daily_allowance: None,
        enforcement: Default::default(),
        price_id: None,
        checkout_url: None,
        features: vec!["synastry".into(), "bulk-export".into()],
        rate_limit: None,
        ..PlanConfig::default()
    }];
}

#[tokio::test]
async fn a_route_outside_the_plan_is_refused_until_a_plan_with_its_feature_is_active() {
    let app = spawn_app_with(with_synastry_plan).await;
    let customer = app.signup().await;
    let res = app.call(SYNASTRY, &customer.api_key).await;
    assert_eq!(res.status(), 403);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code": "FEATURE_NOT_IN_PLAN", "message": "This endpoint is not included in your plan."})
    );
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    assert_eq!(
        app.upstream.recorded().len(),
        1,
        "the refused call was not forwarded"
    );

    let res = app
        .client
        .get(app.url("/account/v1/entitlements"))
        .header("x-api-key", &customer.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let entitlements: Value = res.json().await.unwrap();
    assert_eq!(entitlements, json!({"plan": "free", "features": []}));

    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
            &json!({"plan": "pro"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    assert_eq!(app.call(SYNASTRY, &customer.api_key).await.status(), 200);
    let token = app.login(&customer).await;
    let res = send(&app, Method::GET, "/account/v1/entitlements", &token, None).await;
    let entitlements: Value = res.json().await.unwrap();
    assert_eq!(
        entitlements,
        json!({"plan": "pro", "features": ["synastry", "bulk-export"]})
    );
    app.wait_for_ledger(customer.account_id, 2).await;
    assert_eq!(
        app.usage_of(customer.account_id).await["used"],
        2,
        "the refusal was not accounted"
    );
}

#[tokio::test]
async fn an_admin_subscriptions_features_replace_the_catalogues() {
    let app = spawn_app_with(with_synastry_plan).await;
    let customer = app.signup().await;
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
            &json!({"plan": "pro", "features": ["bulk-export"]}),
        )
        .await;
    assert_eq!(res.status(), 201);
    assert_error(
        app.call(SYNASTRY, &customer.api_key).await,
        403,
        "FEATURE_NOT_IN_PLAN",
    )
    .await;
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
            &json!({"plan": "pro", "features": ["Not Valid"]}),
        )
        .await;
    assert_error(res, 422, "VALIDATION_FAILED").await;
}

#[tokio::test]
async fn the_free_grants_features_come_from_the_configuration() {
    let app = spawn_app_with(|c| {
        with_synastry_plan(c);
        c.usage.free_features = vec!["synastry".into()];
    })
    .await;
    let customer = app.signup().await;
    assert_eq!(app.call(SYNASTRY, &customer.api_key).await.status(), 200);
}

#[tokio::test]
async fn the_plan_catalogue_lists_each_plans_features() {
    let app = spawn_app_with(with_synastry_plan).await;
    let plans: Value = app
        .client
        .get(app.url("/account/v1/plans"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(plans[0]["features"], json!(["synastry", "bulk-export"]));
}

#[tokio::test]
async fn a_subscription_that_ends_takes_its_features_with_it_within_a_second() {
    let app = spawn_app_with(with_synastry_plan).await;
    let customer = app.signup().await;
    let ends = (Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
            &json!({"plan": "pro", "expires_at": ends}),
        )
        .await;
    assert_eq!(res.status(), 201);
    assert_eq!(app.call(SYNASTRY, &customer.api_key).await.status(), 200);
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_error(
        app.call(SYNASTRY, &customer.api_key).await,
        403,
        "FEATURE_NOT_IN_PLAN",
    )
    .await;
}
