//! Calls through a limited key: refused once its month is used up, never forwarded,
//! whatever the account's standing; the account's other keys go on.

use super::*;
use crate::common::*;

#[tokio::test]
async fn a_used_up_key_is_refused_and_the_accounts_other_keys_are_not() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (key_id, key) = new_key(&app, &token, Some(json!({"monthly_limit": 3}))).await;
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &key).await.status(), 200);
    }
    let res = app.call(DAILY, &key).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let to_end = (Month::containing(Utc::now()).end() - Utc::now()).num_seconds();
    assert!(
        (to_end..=to_end + 2).contains(&retry),
        "{retry} vs {to_end}"
    );
    // The account's figures say there is room; the key's own item explains the refusal.
    let header = |name: &str| res.headers()[name].to_str().unwrap().to_owned();
    let (policy, current) = (header("ratelimit-policy"), header("ratelimit"));
    assert!(policy.starts_with("\"monthly\";q=3000;"), "{policy}");
    assert!(policy.contains(", \"key\";q=3;w="), "{policy}");
    assert!(current.starts_with("\"monthly\";r="), "{current}");
    assert!(current.contains(", \"key\";r=0;t="), "{current}");
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code": "KEY_QUOTA_EXCEEDED", "message": "This key's monthly limit is used up."})
    );
    assert_eq!(
        app.upstream.recorded().len(),
        3,
        "the refused call was not forwarded"
    );

    // The account has most of its allowance left, and its other key calls through.
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    assert_eq!(app.upstream.recorded().len(), 4);
    used_through(&app, &token, key_id, 3).await;
    used_through(&app, &token, customer.key_id, 1).await;
    app.wait_for_ledger(customer.account_id, 4).await;
    let keyed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM subscription_tracking WHERE account_id = $1 AND key_id = $2",
    )
    .bind(customer.account_id)
    .bind(key_id)
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(keyed, 3, "the ledger rows record the key");
}

/// The first call through a key is decided on the limit its authentication just read
/// (no second read): a key limited to 0 is refused at once, a key whose limit was set
/// by PATCH before its first call likewise, and an unlimited key passes.
#[tokio::test]
async fn a_keys_first_call_is_held_to_the_limit_its_lookup_read() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (_, zero) = new_key(&app, &token, Some(json!({"monthly_limit": 0}))).await;
    let (patched_id, patched) = new_key(&app, &token, None).await;
    let res = set_limit(&app, &token, patched_id, json!(0)).await;
    assert_eq!(res.status(), 200);
    let (_, plain) = new_key(&app, &token, None).await;

    assert_error(app.call(DAILY, &zero).await, 429, "KEY_QUOTA_EXCEEDED").await;
    assert_error(app.call(DAILY, &patched).await, 429, "KEY_QUOTA_EXCEEDED").await;
    assert_eq!(app.call(DAILY, &plain).await.status(), 200);
    assert_eq!(
        app.upstream.recorded().len(),
        1,
        "only the unlimited key's call"
    );
}

#[tokio::test]
async fn raising_or_clearing_a_limit_lets_the_key_call_again_at_once() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (key_id, key) = new_key(&app, &token, Some(json!({"monthly_limit": 0}))).await;
    assert_eq!(app.call(DAILY, &key).await.status(), 429);
    let res = set_limit(&app, &token, key_id, json!(2)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    assert_eq!(app.call(DAILY, &key).await.status(), 429);
    let res = set_limit(&app, &token, key_id, Value::Null).await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    assert_eq!(app.upstream.recorded().len(), 3);
}

#[tokio::test]
async fn a_lowered_limit_holds_even_while_units_are_reserved() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (key_id, key) = new_key(&app, &token, Some(json!({"monthly_limit": 1000}))).await;
    // The first call reserves a block of the key's units on this replica.
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    let res = set_limit(&app, &token, key_id, json!(2)).await;
    assert_eq!(res.status(), 200);
    let mut forwarded = 1;
    for _ in 0..5 {
        if app.call(DAILY, &key).await.status() == 200 {
            forwarded += 1;
        }
    }
    assert_eq!(forwarded, 2);
    assert_eq!(app.upstream.recorded().len(), 2);
}

#[tokio::test]
async fn a_key_limit_is_not_enforced_in_local_mode() {
    let app = spawn_app_with(|c| {
        c.usage_check.enabled = false;
        c.throttle.enabled = false;
    })
    .await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (key_id, key) = new_key(&app, &token, Some(json!({"monthly_limit": 0}))).await;
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    let item = listed(&app, &token, key_id).await;
    assert_eq!(
        (item["monthly_limit"].as_i64(), item["used"].as_i64()),
        (Some(0), Some(0))
    );
}
