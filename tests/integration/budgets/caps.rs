//! Spend caps in money: refused once reached, with the cap's window in `Retry-After`,
//! the money in the usage object, the figures checked and copied from the catalogue,
//! and never passed by replicas racing for the last units.

use super::*;

#[tokio::test]
async fn a_day_cap_refuses_once_reached_and_the_usage_object_shows_the_money() {
    let app = spawn_app().await;
    let customer = customer_on(
        &app,
        json!({"plan": "metered", "monthly_allowance": 1000, "unit_price_micros": 250,
               "spend_cap_day_micros": 1000}),
    )
    .await;
    for _ in 0..4 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    let res = app.call(DAILY, &customer.api_key).await;
    let retry: i64 = header(&res, "retry-after").parse().unwrap();
    let to_day_end = (Day::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!(
        (to_day_end..=to_day_end + 2).contains(&retry),
        "{retry} vs {to_day_end}"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code": "SPEND_CAP_REACHED", "message": "Spend cap reached for this period."})
    );
    assert_eq!(app.upstream.recorded().len(), 4, "never forwarded");
    assert_eq!(spent(&app, customer.account_id, 4).await, (1000, 1000));
}

#[tokio::test]
async fn a_month_cap_refuses_until_the_months_end() {
    let app = spawn_app().await;
    let customer = customer_on(
        &app,
        json!({"plan": "metered", "monthly_allowance": 1000, "unit_price_micros": 1000,
               "spend_cap_month_micros": 2500}),
    )
    .await;
    // 2 units cost 2,000 (under the cap): a third call still goes; then 3,000 ≥ 2,500.
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    let res = app.call(DAILY, &customer.api_key).await;
    let retry: i64 = header(&res, "retry-after").parse().unwrap();
    let to_month_end = (Month::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!(
        (to_month_end..=to_month_end + 2).contains(&retry),
        "{retry}"
    );
    assert_error(res, 429, "SPEND_CAP_REACHED").await;
    assert_eq!(spent(&app, customer.account_id, 3).await, (3000, 3000));
}

#[tokio::test]
async fn a_plan_without_a_price_spends_nothing() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    assert_eq!(spent(&app, customer.account_id, 1).await, (0, 0));
}

#[tokio::test]
async fn budget_figures_are_checked_and_named_in_the_refusal() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let path = format!("/admin/v1/accounts/{}/subscriptions", customer.account_id);
    for (body, field) in [
        (
            json!({"plan": "p", "monthly_allowance": 1, "spend_cap_day_micros": 5}),
            "unit_price_micros",
        ),
        (
            json!({"plan": "p", "monthly_allowance": 1, "minute_allowance": -1}),
            "minute_allowance",
        ),
        (
            json!({"plan": "p", "monthly_allowance": 1, "unit_price_micros": 2.5}),
            "unit_price_micros",
        ),
        (
            json!({"plan": "p", "monthly_allowance": 1, "unit_price_micros": 1, "spend_cap_month_micros": "x"}),
            "spend_cap_month_micros",
        ),
    ] {
        let res = app.admin_post(&path, &body).await;
        assert_eq!(res.status(), 422, "{body}");
        let error: Value = res.json().await.unwrap();
        assert_eq!(error["code"], "VALIDATION_FAILED");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
    }
}

#[tokio::test]
async fn a_catalogue_plans_budget_is_listed_and_copied_at_activation() {
    let app = spawn_app_with(|c| {
        c.plans = vec![tollgate::config::PlanConfig {
            name: "stream-pro".into(),
            monthly_allowance: 100_000,
            minute_allowance: Some(600),
            unit_price_micros: Some(20),
            spend_cap_day_micros: Some(5_000_000),
            spend_cap_month_micros: Some(100_000_000),
            ..Default::default()
        }];
    })
    .await;
    let customer = app.signup().await;
    let plans: Value = app
        .client
        .get(app.url("/account/v1/plans"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(plans[0]["minute_allowance"], 600);
    assert_eq!(plans[0]["spend_cap_month_micros"], 100_000_000);
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
            &json!({"plan": "stream-pro", "spend_cap_day_micros": null}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    assert_eq!(created["minute_allowance"], 600);
    assert_eq!(created["unit_price_micros"], 20);
    assert_eq!(
        created["spend_cap_day_micros"],
        Value::Null,
        "null clears the catalogue's"
    );
    assert_eq!(created["spend_cap_month_micros"], 100_000_000);
    // The usage object prices the units at the subscription's price.
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    assert_eq!(spent(&app, customer.account_id, 3).await, (60, 60));
}

#[tokio::test]
async fn replicas_racing_for_the_last_of_a_spend_cap_never_pass_it() {
    const CAP_UNITS: i64 = 30;
    let first = spawn_app().await;
    let customer = customer_on(
        &first,
        json!({"plan": "capped", "monthly_allowance": 100000, "unit_price_micros": 3,
               "spend_cap_day_micros": CAP_UNITS * 3}),
    )
    .await;
    let config = test_config(&first.db, &first.upstream);
    let second = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    let replicas = [Arc::new(first), Arc::new(second)];
    let mut calls = Vec::new();
    for i in 0..100 {
        let app = replicas[i % 2].clone();
        let key = customer.api_key.clone();
        calls.push(tokio::spawn(
            async move { app.call(DAILY, &key).await.status() },
        ));
    }
    let mut forwarded = 0;
    for call in calls {
        match call.await.unwrap() {
            StatusCode::OK => forwarded += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
    }
    println!("spend cap of {CAP_UNITS} units over 2 replicas, 100 calls: {forwarded} forwarded");
    assert!(forwarded <= CAP_UNITS, "overshoot: {forwarded}");
    assert!(forwarded >= CAP_UNITS - 2, "units stranded: {forwarded}");
    assert_eq!(replicas[0].upstream.recorded().len() as i64, forwarded);
}
