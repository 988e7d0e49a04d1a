//! Priced calls and top-up credit.

use super::*;
use crate::common::*;

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

    // A redelivered event (the same transaction, account and time) spends nothing.
    let accountant = app.accountant.clone().expect("metering on");
    let ledger: Vec<(uuid::Uuid, chrono::DateTime<Utc>)> = sqlx::query_as(
        "SELECT transaction_id, occurred_at FROM subscription_tracking WHERE account_id = $1",
    )
    .bind(customer.account_id)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    let again = tollgate::usage::accounting::UsageEvent {
        transaction_id: ledger[3].0,
        account_id: customer.account_id,
        key_id: customer.key_id,
        occurred_at: ledger[3].1,
        method: axum::http::Method::GET,
        route: DAILY.into(),
        upstream_status: 200,
        cost: 1,
        reserved_by: None,
        key_reserved_by: None,
        latency_us: None,
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
