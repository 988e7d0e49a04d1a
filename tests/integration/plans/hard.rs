//! Hard enforcement: refused past the allowance, never forwarded, across replicas.

use super::*;
use crate::common::*;

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
    // Right after the last allowed call, the ledger may not have counted it yet: the
    // refusal still reports nothing left.
    assert_eq!(monthly_item(&header(&res, "ratelimit")).0, 0);
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
    let current = header(&res, "ratelimit");
    assert!(current.contains("\"daily\";r=0;"), "{current}");
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
