//! The daily window of soft plans: its own marker, admitted by the same hash.

use super::*;
use crate::common::*;

#[tokio::test]
async fn a_used_up_day_of_a_soft_plan_is_marked_and_throttled_by_the_hash() {
    let kv = tollgate_testkit::fake_kv::FakeKv::start().await;
    let app = spawn_app_with(|c| use_kv(c, &kv)).await;
    let customer = app.signup().await;
    subscribe(
        &app,
        customer.account_id,
        json!({"plan": "pro", "monthly_allowance": 1000, "daily_allowance": 3}),
    )
    .await;
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    used(&app, customer.account_id, 3).await;
    let day = Day::containing(Utc::now());
    let key = format!(
        "usage-exhausted-daily:{}:{}",
        customer.account_id,
        day.start_unix()
    );
    let written = eventually(Duration::from_secs(10), || async {
        kv.value(&key).is_some()
    })
    .await;
    assert!(written, "daily marker {key} written");
    let expiration = kv
        .value(&key)
        .and_then(|(_, e)| e)
        .expect("the marker expires");
    assert!(expiration >= day.end().timestamp());

    let mut throttled = 0;
    for _ in 0..50 {
        let res = app.call(DAILY, &customer.api_key).await;
        if res.status() == StatusCode::TOO_MANY_REQUESTS {
            throttled += 1;
            assert_eq!(header(&res, "retry-after"), "1");
            assert!(header(&res, "ratelimit").contains("\"daily\";r=0"));
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["code"], "REQUEST_THROTTLED");
        }
    }
    assert!((25..50).contains(&throttled), "{throttled} of 50 throttled");
}
