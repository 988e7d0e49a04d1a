//! Rate limits per second (SPEC §16): per key, per plan and per subscription, the
//! tighter winning; refusals are never forwarded nor accounted.

use tollgate::config::PlanConfig;
use tollgate::plan::RateLimitInput;

use super::*;
use crate::common::*;

/// Fires `n` calls through `key` at once; the statuses.
async fn burst_of(app: &TestApp, key: &str, n: usize) -> Vec<reqwest::Response> {
    let calls = (0..n).map(|_| app.call(DAILY, key));
    futures_util::future::join_all(calls).await
}

#[tokio::test]
async fn a_keys_burst_passes_and_the_rest_are_rate_limited_unforwarded() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (_, key) = new_key(
        &app,
        &token,
        json!({"rate_limit": {"per_second": 1, "burst": 5}}),
    )
    .await;
    let answers = burst_of(&app, &key, 12).await;
    let passed: Vec<_> = answers.iter().filter(|r| r.status() == 200).collect();
    assert_eq!(passed.len(), 5, "the burst");
    let policy = passed[0].headers()["ratelimit-policy"].to_str().unwrap();
    assert!(policy.contains("\"burst\";q=5;w=1"), "{policy}");
    let refused: Vec<_> = answers.into_iter().filter(|r| r.status() == 429).collect();
    assert_eq!(refused.len(), 7);
    for res in refused {
        let retry: u64 = res.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=2).contains(&retry), "{retry}");
        let current = res.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(current.contains("\"burst\";r=0;t="), "{current}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(
            body,
            json!({"code": "RATE_LIMITED", "message": "Too many requests. Please slow down."})
        );
    }
    assert_eq!(
        app.upstream.recorded().len(),
        5,
        "refused calls were not forwarded"
    );
    app.wait_for_ledger(customer.account_id, 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.usage_of(customer.account_id).await["used"],
        5,
        "nor accounted"
    );
    // A second later, one more call's room.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    // The account's other key is not limited.
    assert!(
        burst_of(&app, &customer.api_key, 12)
            .await
            .iter()
            .all(|r| r.status() == 200)
    );
}

#[tokio::test]
async fn a_plans_rate_limit_holds_for_every_key_of_the_account_and_the_tighter_wins() {
    let app = spawn_app_with(|c| {
        c.plans = vec![PlanConfig {
            name: "starter".into(),
            monthly_allowance: 10_000,
            daily_allowance: None,
            enforcement: Default::default(),
            price_id: None,
            checkout_url: None,
            features: vec![],
            rate_limit: Some(RateLimitInput {
                per_second: 1,
                burst: Some(6),
            }),
            ..PlanConfig::default()
        }];
    })
    .await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
            &json!({"plan": "starter"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let (_, second) = new_key(
        &app,
        &token,
        json!({"rate_limit": {"per_second": 1, "burst": 2}}),
    )
    .await;
    // The second key's own burst of 2 is the tighter for it.
    let through_second = burst_of(&app, &second, 4).await;
    assert_eq!(
        through_second.iter().filter(|r| r.status() == 200).count(),
        2
    );
    // The account's burst of 6 is shared: 4 left for the first key.
    let through_first = burst_of(&app, &customer.api_key, 8).await;
    assert_eq!(
        through_first.iter().filter(|r| r.status() == 200).count(),
        4
    );
    assert_eq!(app.upstream.recorded().len(), 6);
}

#[tokio::test]
async fn an_admin_subscription_sets_or_clears_the_rate_limit() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let subscribe = |body: Value| {
        let app = &app;
        async move {
            app.admin_post(
                &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
                &body,
            )
            .await
        }
    };
    let res = subscribe(json!({"plan": "burst", "monthly_allowance": 1000,
                               "rate_limit": {"per_second": 2, "burst": 3}}))
    .await;
    assert_eq!(res.status(), 201);
    let passed = burst_of(&app, &customer.api_key, 6).await;
    assert_eq!(passed.iter().filter(|r| r.status() == 200).count(), 3);
    let res =
        subscribe(json!({"plan": "wide", "monthly_allowance": 1000, "rate_limit": null})).await;
    assert_eq!(res.status(), 201);
    // Every replica follows an activation within a second.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let passed = burst_of(&app, &customer.api_key, 6).await;
    assert!(passed.iter().all(|r| r.status() == 200));
    for (body, field) in [
        (
            json!({"plan": "x", "monthly_allowance": 1, "rate_limit": {"per_second": 0}}),
            "rate_limit.per_second",
        ),
        (
            json!({"plan": "x", "monthly_allowance": 1, "rate_limit": {"per_second": 5, "burst": 1}}),
            "rate_limit.burst",
        ),
    ] {
        let res = subscribe(body).await;
        assert_eq!(res.status(), 422);
        let error: Value = res.json().await.unwrap();
        assert!(
            error["message"].as_str().unwrap().contains(field),
            "{error}"
        );
    }
}

#[tokio::test]
async fn the_free_grants_rate_limit_comes_from_the_configuration() {
    let app = spawn_app_with(|c| {
        c.usage.free_rate_limit = Some(RateLimitInput {
            per_second: 1,
            burst: Some(3),
        });
    })
    .await;
    let customer = app.signup().await;
    let passed = burst_of(&app, &customer.api_key, 6).await;
    assert_eq!(passed.iter().filter(|r| r.status() == 200).count(), 3);
}

/// Three replicas share one limit: spread evenly, the fleet admits about the configured
/// rate over ten seconds, not three times it.
#[tokio::test]
async fn replicas_share_a_rate_limit() {
    const RATE: u32 = 20;
    let first = spawn_app().await;
    let customer = first.signup().await;
    let token = first.login(&customer).await;
    let (_, key) = new_key(
        &first,
        &token,
        json!({"rate_limit": {"per_second": RATE, "burst": RATE}}),
    )
    .await;
    let config = test_config(&first.db, &first.upstream);
    let second = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    let config = test_config(&first.db, &first.upstream);
    let third = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    let fleet = [&first, &second, &third];
    // Every replica has counted the others (heartbeats every 2 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fleet.iter().any(|app| app.state.rates.replicas() < 3) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "replicas never saw each other"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 100 calls a second, in turn through each replica, for ten seconds.
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut passed = 0u32;
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(10) {
        tick.tick().await;
        let app = fleet[i % 3];
        i += 1;
        if app.call(DAILY, &key).await.status() == 200 {
            passed += 1;
        }
    }
    let expected = RATE * 10 + RATE; // the rate over ten seconds, plus the first burst
    println!("fleet of 3 at {RATE}/s over 10 s: {passed} admitted of {i} (expected ~{expected})");
    assert!(
        passed as f64 <= expected as f64 * 1.25 && passed as f64 >= expected as f64 * 0.75,
        "{passed} admitted, expected about {expected}"
    );
}
