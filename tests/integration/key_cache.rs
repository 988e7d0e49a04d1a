//! The per-replica API-key cache: a revoked key is refused by every replica within one
//! second, however it was revoked and even when a replica's listener was lost; the
//! cache can be switched off.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::common::{Customer, TestApp, eventually, spawn_app, spawn_app_with, spawn_replica};

const DAILY: &str = "/vedic/v1/horoscope/daily?sign=leo";
/// The promise: every replica refuses a revoked key within this.
const WITHIN: Duration = Duration::from_secs(1);

async fn second_replica(a: &TestApp) -> TestApp {
    let config = (*a.state.config).clone();
    spawn_replica(Arc::clone(&a.db), Arc::clone(&a.upstream), config).await
}

/// Waits until `app`'s cache is trusted, then makes sure it holds `customer`'s key.
async fn cached_on(app: &TestApp, customer: &Customer) {
    assert!(
        eventually(Duration::from_secs(5), || async {
            app.state.keys.trusted()
        })
        .await,
        "the cache's listener is heard"
    );
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    assert_eq!(app.state.keys.len(), 1, "the key is cached");
}

/// How long until `app` refuses `key` (panics past five seconds).
async fn time_until_refused(app: &TestApp, key: &str, from: Instant) -> Duration {
    loop {
        let status = app.call(DAILY, key).await.status();
        if status == StatusCode::UNAUTHORIZED {
            return from.elapsed();
        }
        assert_eq!(status, 200);
        assert!(from.elapsed() < Duration::from_secs(5), "never refused");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn revoke_by_hand(app: &TestApp, key_id: i64) -> Instant {
    sqlx::query("UPDATE api_key SET revoked_at = now() WHERE id = $1")
        .bind(key_id)
        .execute(&app.db.pool)
        .await
        .unwrap();
    Instant::now()
}

#[tokio::test]
async fn a_key_revoked_through_one_replica_is_refused_by_both_within_a_second() {
    let a = spawn_app().await;
    let b = second_replica(&a).await;
    let customer = a.signup().await;
    cached_on(&a, &customer).await;
    cached_on(&b, &customer).await;

    let token = a.login(&customer).await;
    let res = a
        .client
        .delete(a.url(&format!("/account/v1/keys/{}", customer.key_id)))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    let revoked = Instant::now();
    assert_eq!(
        a.call(DAILY, &customer.api_key).await.status(),
        401,
        "the revoking replica refuses from the next call on"
    );
    let waited = time_until_refused(&b, &customer.api_key, revoked).await;
    assert!(waited < WITHIN, "the other replica took {waited:?}");
}

#[tokio::test]
async fn a_key_revoked_by_hand_in_sql_is_refused_by_every_replica_within_a_second() {
    let a = spawn_app().await;
    let b = second_replica(&a).await;
    let customer = a.signup().await;
    let other = a.signup().await;
    cached_on(&a, &customer).await;
    cached_on(&b, &customer).await;
    assert_eq!(b.call(DAILY, &other.api_key).await.status(), 200);

    let revoked = revoke_by_hand(&a, customer.key_id).await;
    for app in [&a, &b] {
        let waited = time_until_refused(app, &customer.api_key, revoked).await;
        assert!(waited < WITHIN, "a replica took {waited:?}");
    }
    assert_eq!(
        b.call(DAILY, &other.api_key).await.status(),
        200,
        "other keys are unaffected"
    );
}

#[tokio::test]
async fn a_replica_whose_listener_was_lost_still_refuses_a_revoked_key_within_a_second() {
    let a = spawn_app().await;
    let customer = a.signup().await;
    cached_on(&a, &customer).await;

    // Cut the listener's connection; the revocation's notification goes nowhere.
    let cut: Vec<i32> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid)::int FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE 'LISTEN%api_key%'",
    )
    .fetch_all(&a.db.pool)
    .await
    .unwrap();
    assert_eq!(cut, vec![1], "one listener connection was cut");
    let revoked = revoke_by_hand(&a, customer.key_id).await;
    let waited = time_until_refused(&a, &customer.api_key, revoked).await;
    assert!(waited < WITHIN, "took {waited:?}");

    // The listener comes back and the cache serves again.
    let fresh = a.signup().await;
    assert!(
        eventually(Duration::from_secs(5), || async { a.state.keys.trusted() }).await,
        "the listener reconnects"
    );
    assert_eq!(a.call(DAILY, &fresh.api_key).await.status(), 200);
    assert_eq!(a.call(DAILY, &customer.api_key).await.status(), 401);
}

#[tokio::test]
async fn with_the_cache_off_every_call_asks_the_database() {
    let a = spawn_app_with(|c| c.key_cache.enabled = false).await;
    let customer = a.signup().await;
    assert_eq!(a.call(DAILY, &customer.api_key).await.status(), 200);
    assert!(!a.state.keys.is_enabled());
    assert_eq!(a.state.keys.len(), 0);
    revoke_by_hand(&a, customer.key_id).await;
    assert_eq!(a.call(DAILY, &customer.api_key).await.status(), 401);
}
