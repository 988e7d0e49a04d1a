//! Windows of totals per minute: refused once used up, open again at the next epoch
//! minute, composed with the day, shared by replicas.

use super::*;

#[tokio::test]
async fn a_minute_window_refuses_once_used_up_and_opens_at_the_next_minute() {
    let app = spawn_app().await;
    let customer = customer_on(
        &app,
        json!({"plan": "minutes", "monthly_allowance": 1000, "minute_allowance": 3}),
    )
    .await;
    early_in_a_minute(20).await;
    for left in [2, 1, 0] {
        let res = app.call(DAILY, &customer.api_key).await;
        assert_eq!(res.status(), 200);
        assert_eq!(item(&header(&res, "ratelimit"), "minute").unwrap().0, left);
        assert_eq!(
            item(&header(&res, "ratelimit-policy"), "minute"),
            Some((3, 60))
        );
    }
    let res = app.call(DAILY, &customer.api_key).await;
    let retry: i64 = header(&res, "retry-after").parse().unwrap();
    let to_boundary = 60 - Utc::now().timestamp().rem_euclid(60);
    assert!(
        (to_boundary - 1..=to_boundary + 1).contains(&retry),
        "{retry} vs {to_boundary}"
    );
    assert_eq!(
        item(&header(&res, "ratelimit"), "minute").unwrap(),
        (0, retry)
    );
    assert_error(res, 429, "QUOTA_EXCEEDED").await;
    assert_eq!(app.upstream.recorded().len(), 3, "never forwarded");

    // The next minute is a new window.
    tokio::time::sleep(Duration::from_millis(retry as u64 * 1000 + 100)).await;
    let res = app.call(DAILY, &customer.api_key).await;
    assert_eq!(res.status(), 200);
    assert_eq!(item(&header(&res, "ratelimit"), "minute").unwrap().0, 2);
    used(&app, customer.account_id, 4).await;
}

#[tokio::test]
async fn when_the_minute_and_the_day_are_both_used_up_retry_after_is_the_days_end() {
    let app = spawn_app().await;
    let customer = customer_on(
        &app,
        json!({"plan": "tight", "monthly_allowance": 1000, "daily_allowance": 2,
               "enforcement": "hard", "minute_allowance": 2}),
    )
    .await;
    early_in_a_minute(20).await;
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    used(&app, customer.account_id, 2).await;
    let res = app.call(DAILY, &customer.api_key).await;
    let retry: i64 = header(&res, "retry-after").parse().unwrap();
    let to_day_end = (Day::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!(
        (to_day_end..=to_day_end + 2).contains(&retry),
        "{retry} vs {to_day_end}"
    );
    assert_eq!(item(&header(&res, "ratelimit"), "minute").unwrap().0, 0);
    assert_error(res, 429, "QUOTA_EXCEEDED").await;
}

#[tokio::test]
async fn replicas_share_a_minute_window_and_forward_no_more_than_it_together() {
    let first = spawn_app().await;
    let customer = customer_on(
        &first,
        json!({"plan": "minutes", "monthly_allowance": 1000, "minute_allowance": 4}),
    )
    .await;
    let config = test_config(&first.db, &first.upstream);
    let second = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    // Both have heard each other's heartbeat (every 2 s).
    tokio::time::sleep(Duration::from_millis(4500)).await;
    early_in_a_minute(20).await;
    let mut forwarded = 0;
    for replica in [&first, &second] {
        for _ in 0..4 {
            let res = replica.call(DAILY, &customer.api_key).await;
            if res.status() == 200 {
                forwarded += 1;
                assert_eq!(
                    item(&header(&res, "ratelimit-policy"), "minute"),
                    Some((2, 60)),
                    "each replica's share"
                );
            } else {
                assert_error(res, 429, "QUOTA_EXCEEDED").await;
            }
        }
    }
    assert_eq!(forwarded, 4);
    assert_eq!(first.upstream.recorded().len(), 4);
}

#[tokio::test]
async fn a_cost_the_upstream_reports_is_spent_in_the_minute() {
    let app = spawn_app_with(|c| {
        c.pricing.cost_header = Some(tollgate_testkit::upstream::COST_HEADER.into());
    })
    .await;
    let customer = customer_on(
        &app,
        json!({"plan": "minutes", "monthly_allowance": 1000, "minute_allowance": 6}),
    )
    .await;
    early_in_a_minute(20).await;
    let res = app.call("/vedic/v1/cost/5", &customer.api_key).await;
    assert_eq!(res.status(), 200);
    assert_eq!(item(&header(&res, "ratelimit"), "minute").unwrap().0, 1);
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    let res = app.call(DAILY, &customer.api_key).await;
    assert_error(res, 429, "QUOTA_EXCEEDED").await;
    used(&app, customer.account_id, 6).await;
}
