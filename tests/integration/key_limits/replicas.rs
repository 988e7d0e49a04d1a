//! One limited key raced through three replicas on one database: never more units
//! forwarded than its limit.

use super::*;
use crate::common::*;

#[tokio::test]
async fn three_replicas_racing_one_limited_key_never_overshoot() {
    const LIMIT: i64 = 50;
    let first = spawn_app().await;
    let customer = first.signup().await;
    let token = first.login(&customer).await;
    let (key_id, key) = new_key(&first, &token, Some(json!({"monthly_limit": LIMIT}))).await;
    let mut replicas = vec![Arc::new(first)];
    for _ in 0..2 {
        let config = test_config(&replicas[0].db, &replicas[0].upstream);
        replicas.push(Arc::new(
            spawn_replica(replicas[0].db.clone(), replicas[0].upstream.clone(), config).await,
        ));
    }
    let mut calls = Vec::new();
    for i in 0..240 {
        let app = replicas[i % 3].clone();
        let key = key.clone();
        calls.push(tokio::spawn(
            async move { app.call(DAILY, &key).await.status() },
        ));
    }
    let (mut forwarded, mut refused) = (0, 0);
    for call in calls {
        match call.await.unwrap() {
            StatusCode::OK => forwarded += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    let received = replicas[0].upstream.recorded().len() as i64;
    println!(
        "key limit of {LIMIT} over 3 replicas, 240 calls: {forwarded} forwarded, \
         {refused} refused, upstream received {received}"
    );
    assert_eq!(received, forwarded);
    assert!(received <= LIMIT, "overshoot: {received} > {LIMIT}");
    assert!(received >= LIMIT - 3, "units left stranded: {received}");
    // The account's signup key is not held back by the used-up one.
    assert_eq!(
        replicas[1].call(DAILY, &customer.api_key).await.status(),
        200
    );
    used_through(&replicas[2], &token, key_id, received).await;
}
