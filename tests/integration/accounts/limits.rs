//! Abuse limits of the account API (SPEC §2 `account.*`, §3.2): signups per address,
//! failed logins per email and per address, keys per account, bounded key listings.

use std::net::IpAddr;

use super::with_session;
use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A client whose connections come from `ip` (any address of the loopback range).
pub(super) fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

pub(super) async fn login_from(
    app: &TestApp,
    client: &reqwest::Client,
    email: &str,
    password: &str,
) -> reqwest::Response {
    client
        .post(app.url("/account/v1/login"))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap()
}

/// The status and error code of a JSON error response.
pub(super) async fn error_code(res: reqwest::Response) -> (StatusCode, String) {
    let status = res.status();
    let body: Value = res.json().await.expect("error bodies are JSON");
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

/// Asserts a `429 TOO_MANY_REQUESTS` with a `Retry-After` of whole seconds; returns them.
pub(super) async fn expect_too_many(res: reqwest::Response) -> u64 {
    let retry_after = res
        .headers()
        .get("retry-after")
        .expect("a 429 carries Retry-After")
        .to_str()
        .unwrap()
        .parse::<u64>()
        .expect("Retry-After is delay-seconds");
    assert_eq!(
        error_code(res).await,
        (StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS".into())
    );
    assert!(retry_after >= 1);
    retry_after
}

pub(super) async fn create_key(app: &TestApp, token: &str) -> reqwest::Response {
    with_session(app, Method::POST, "/account/v1/keys", token).await
}

#[tokio::test]
async fn the_21st_signup_from_one_address_within_the_hour_is_429_with_retry_after() {
    let app = spawn_app().await;
    for _ in 0..20 {
        app.signup().await;
    }
    let res = app
        .post_json(
            "/account/v1/signup",
            &json!({"email": "one-more@example.com", "password": "long enough"}),
        )
        .await;
    let retry_after = expect_too_many(res).await;
    // 20 an hour: one more signup every three minutes.
    assert!(retry_after <= 180, "{retry_after}");

    let elsewhere = client_from("127.0.0.2")
        .post(app.url("/account/v1/signup"))
        .json(&json!({"email": "one-more@example.com", "password": "long enough"}))
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 201, "another address is not limited");
}

#[tokio::test]
async fn failed_logins_from_other_addresses_slow_the_owner_but_never_lock_them_out() {
    let app = spawn_app().await;
    let victim = app.signup().await;
    for attacker in ["127.0.0.2", "127.0.0.4"] {
        let attacker = client_from(attacker);
        for _ in 0..10 {
            let res = login_from(&app, &attacker, &victim.email, "wrong password").await;
            assert_eq!(res.status(), 401);
        }
        // The attacker's own address is spent, even with the right password.
        expect_too_many(login_from(&app, &attacker, &victim.email, &victim.password).await).await;
    }
    // From an address that has not failed, the right password still signs in, after a
    // delay: the email has failed past its limit.
    let owner = client_from("127.0.0.3");
    let started = std::time::Instant::now();
    let res = login_from(&app, &owner, &victim.email, &victim.password).await;
    assert_eq!(res.status(), 200);
    assert!(
        started.elapsed() >= tollgate::auth::account_limits::EMAIL_SLOWDOWN,
        "the sign-in is slowed"
    );
    // A wrong password from there is 401, not 429.
    let res = login_from(&app, &owner, &victim.email, "wrong password").await;
    assert_eq!(res.status(), 401);
}

#[tokio::test]
async fn failed_logins_count_across_the_fleet() {
    let first = spawn_app().await;
    let mut replicas = vec![];
    for _ in 0..2 {
        let config = first.state.config.as_ref().clone();
        replicas.push(spawn_replica(first.db.clone(), first.upstream.clone(), config).await);
    }
    let customer = first.signup().await;
    let guesser = client_from("127.0.0.2");
    // Ten failures spread over three replicas spend the address's ten an hour.
    for i in 0..10 {
        let app = [&first, &replicas[0], &replicas[1]][i % 3];
        let res = login_from(app, &guesser, &customer.email, "wrong password").await;
        assert_eq!(res.status(), 401, "failure {i}");
    }
    for app in [&first, &replicas[0], &replicas[1]] {
        expect_too_many(login_from(app, &guesser, &customer.email, &customer.password).await).await;
    }
}

#[tokio::test]
async fn signups_count_across_the_fleet() {
    let first = spawn_app_with(|c| c.account.signups_per_ip_per_hour = 6).await;
    let config = first.state.config.as_ref().clone();
    let second = spawn_replica(first.db.clone(), first.upstream.clone(), config.clone()).await;
    let third = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    let apps = [&first, &second, &third];
    for i in 0..6 {
        apps[i % 3].signup().await;
    }
    for app in apps {
        let res = app
            .post_json(
                "/account/v1/signup",
                &json!({"email": "one-more@example.com", "password": "long enough"}),
            )
            .await;
        expect_too_many(res).await;
    }
}

#[tokio::test]
async fn after_ten_failed_logins_from_an_address_every_login_from_it_is_429() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let guesser = client_from("127.0.0.2");
    for i in 0..10 {
        let res = login_from(&app, &guesser, &format!("nobody{i}@example.com"), "guess").await;
        assert_eq!(res.status(), 401);
    }
    let res = login_from(&app, &guesser, &customer.email, &customer.password).await;
    expect_too_many(res).await;
    // The customer's own address still logs in.
    let res = login_from(
        &app,
        &client_from("127.0.0.3"),
        &customer.email,
        &customer.password,
    )
    .await;
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn successful_logins_do_not_count_toward_the_failure_limit() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let client = client_from("127.0.0.2");
    for _ in 0..12 {
        let res = login_from(&app, &client, &customer.email, &customer.password).await;
        assert_eq!(res.status(), 200);
    }
    for _ in 0..9 {
        let res = login_from(&app, &client, &customer.email, "wrong password").await;
        assert_eq!(res.status(), 401);
    }
    let res = login_from(&app, &client, &customer.email, &customer.password).await;
    assert_eq!(
        res.status(),
        200,
        "nine failures are under the limit of ten"
    );
}

#[tokio::test]
async fn an_account_holds_at_most_twenty_unrevoked_keys_and_revoking_frees_a_slot() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let mut ids = vec![customer.key_id];
    for _ in 1..20 {
        let res = create_key(&app, &token).await;
        assert_eq!(res.status(), 201);
        let body: Value = res.json().await.unwrap();
        ids.push(body["key_id"].as_i64().unwrap());
    }
    assert_eq!(
        error_code(create_key(&app, &token).await).await,
        (StatusCode::CONFLICT, "KEY_LIMIT".into())
    );

    let res = with_session(
        &app,
        Method::DELETE,
        &format!("/account/v1/keys/{}", ids[3]),
        &token,
    )
    .await;
    assert_eq!(res.status(), 204);
    assert_eq!(create_key(&app, &token).await.status(), 201);
    assert_eq!(
        error_code(create_key(&app, &token).await).await,
        (StatusCode::CONFLICT, "KEY_LIMIT".into())
    );
}

#[tokio::test]
async fn concurrent_key_creations_never_pass_the_limit() {
    let app = spawn_app_with(|c| c.account.max_keys = 3).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let attempts = futures_util::future::join_all((0..8).map(|_| create_key(&app, &token))).await;
    let created = attempts.iter().filter(|r| r.status() == 201).count();
    let refused = attempts.iter().filter(|r| r.status() == 409).count();
    assert_eq!((created, refused), (2, 6));
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_key WHERE account_id = $1 AND revoked_at IS NULL",
    )
    .bind(customer.account_id)
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(live, 3);
}

#[tokio::test]
async fn key_listings_are_paged_in_id_order_with_a_next_link() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    for _ in 0..4 {
        assert_eq!(create_key(&app, &token).await.status(), 201);
    }
    let all: Value = with_session(&app, Method::GET, "/account/v1/keys", &token)
        .await
        .json()
        .await
        .unwrap();
    let all: Vec<i64> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key_id"].as_i64().unwrap())
        .collect();
    assert_eq!(all.len(), 5);
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");

    let mut seen = Vec::new();
    let mut next = Some("/account/v1/keys?limit=2".to_owned());
    while let Some(path) = next.take() {
        let res = with_session(&app, Method::GET, &path, &token).await;
        assert_eq!(res.status(), 200);
        next = res.headers().get("link").map(|link| {
            let link = link.to_str().unwrap();
            assert!(link.ends_with(r#">; rel="next""#), "{link}");
            link[1..link.find('>').unwrap()].to_owned()
        });
        let page: Value = res.json().await.unwrap();
        let page = page.as_array().unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|k| k["key_id"].as_i64().unwrap()));
        assert!(seen.len() <= 6, "the pages end");
    }
    assert_eq!(seen, all);

    let after_third = format!("/account/v1/keys?after={}", all[2]);
    let rest: Value = with_session(&app, Method::GET, &after_third, &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest.as_array().unwrap().len(), 2);
    for bad in ["limit=0", "limit=1001", "limit=x", "after=x"] {
        let res = with_session(
            &app,
            Method::GET,
            &format!("/account/v1/keys?{bad}"),
            &token,
        )
        .await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED".into()),
            "{bad}"
        );
    }
}
