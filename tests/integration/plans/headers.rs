//! Quota headers on every answer of an authenticated proxied call.

use super::*;
use crate::common::*;

#[tokio::test]
async fn every_proxied_answer_carries_the_quota_headers_in_the_drafts_syntax() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app.call(DAILY, &customer.api_key).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        format!("\"monthly\";q=3000;w={}", month_seconds())
    );
    let (remaining, reset) = monthly_item(&header(&res, "ratelimit"));
    assert_eq!(remaining, 3000);
    let to_end = (Month::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!(
        (to_end..=to_end + 2).contains(&reset),
        "t={reset}, {to_end}"
    );

    // An upstream error status is an answer too.
    let res = app.call("/vedic/v1/status/503", &customer.api_key).await;
    assert_eq!(res.status(), 503);
    assert!(res.headers().contains_key("ratelimit"));

    // Figures follow the accounting.
    used(&app, customer.account_id, 2).await;
    let res = app.call(DAILY, &customer.api_key).await;
    assert_eq!(monthly_item(&header(&res, "ratelimit")).0, 2998);
}

#[tokio::test]
async fn a_daily_plan_adds_daily_items_and_the_usage_object_reports_the_day() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    subscribe(
        &app,
        customer.account_id,
        json!({"plan": "pro", "monthly_allowance": 1000, "daily_allowance": 10}),
    )
    .await;
    let res = app.call(DAILY, &customer.api_key).await;
    let policy = header(&res, "ratelimit-policy");
    assert_eq!(
        policy,
        format!(
            "\"monthly\";q=1000;w={}, \"daily\";q=10;w=86400",
            month_seconds()
        )
    );
    let usage = used(&app, customer.account_id, 1).await;
    let day = Day::containing(Utc::now());
    assert_eq!(
        usage["daily"],
        json!({"day_start": day.start(), "allowance": 10, "used": 1, "remaining": 9})
    );
    assert_eq!(usage["enforcement"], "soft");
    assert_eq!(usage["credits"], 0);
}

#[tokio::test]
async fn a_replica_shows_what_another_replica_accounted() {
    let first = spawn_app().await;
    let customer = first.signup().await;
    let config = test_config(&first.db, &first.upstream);
    let second = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    // The second replica knows the account before the first one accounts anything.
    let res = second.call(DAILY, &customer.api_key).await;
    assert_eq!(monthly_item(&header(&res, "ratelimit")).0, 3000);
    for _ in 0..4 {
        first.call(DAILY, &customer.api_key).await;
    }
    used(&first, customer.account_id, 5).await;
    let seen = eventually(Duration::from_secs(2), || async {
        let res = second.call(DAILY, &customer.api_key).await;
        monthly_item(&header(&res, "ratelimit")).0 <= 2995
    })
    .await;
    assert!(
        seen,
        "the second replica's headers follow the first one's accounting"
    );
}
