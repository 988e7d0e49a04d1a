//! Signup and login: ids, key and password storage, the free grant, and what bad
//! input gets back.

use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn signup_returns_integer_ids_and_a_prefixed_key_stored_only_as_a_hash() {
    let app = spawn_app().await;
    let res = app
        .post_json(
            "/account/v1/signup",
            &json!({"email": "Ann@Example.com", "password": "s3cure-enough"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let body: Value = res.json().await.unwrap();
    assert!(
        body["account_id"].is_i64() && body["key_id"].is_i64(),
        "{body}"
    );
    let key = body["api_key"].as_str().unwrap();
    assert!(key.starts_with("tgk_") && key.len() >= 36, "{key}");

    let stored: Vec<(Vec<u8>, String)> = sqlx::query_as("SELECT key_hash, prefix FROM api_key")
        .fetch_all(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    use sha2::Digest;
    assert_eq!(stored[0].0, sha2::Sha256::digest(key.as_bytes()).to_vec());
    assert!(key.starts_with(&stored[0].1) && stored[0].1.len() < 16);
    let password: String = sqlx::query_scalar("SELECT password_hash FROM account")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert!(password.starts_with("$argon2id$"));
}

#[tokio::test]
async fn signup_allocates_the_free_grant_of_the_current_month() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let grants: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT allowance, is_free FROM monthly_usage
         WHERE account_id = $1 AND month_start = date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
    )
    .bind(customer.account_id)
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    assert_eq!(grants, vec![(3000, true)]);
    let usage = app.usage_of(customer.account_id).await;
    assert_eq!(usage["plan"], "free");
    assert_eq!(usage["allowance"], 3000);
    assert_eq!(usage["used"], 0);
    assert_eq!(usage["remaining"], 3000);
    assert_eq!(usage["exhausted"], false);
}

#[tokio::test]
async fn the_same_email_in_any_case_cannot_sign_up_twice() {
    let app = spawn_app().await;
    let body = json!({"email": "bob@example.com", "password": "long enough"});
    assert_eq!(
        app.post_json("/account/v1/signup", &body).await.status(),
        201
    );
    let again = json!({"email": " BOB@example.com ", "password": "other password"});
    let res = app.post_json("/account/v1/signup", &again).await;
    assert_error(res, 409, "EMAIL_TAKEN").await;
}

#[tokio::test]
async fn concurrent_signups_with_one_email_create_one_account() {
    let app = spawn_app().await;
    let body = json!({"email": "race@example.com", "password": "long enough"});
    let attempts =
        futures_util::future::join_all((0..5).map(|_| app.post_json("/account/v1/signup", &body)))
            .await;
    let created = attempts.iter().filter(|r| r.status() == 201).count();
    let taken = attempts.iter().filter(|r| r.status() == 409).count();
    assert_eq!((created, taken), (1, 4));
}

#[tokio::test]
async fn invalid_signups_are_refused_with_validation_failed() {
    let app = spawn_app().await;
    for body in [
        json!({"email": "not-an-email", "password": "long enough"}),
        json!({"email": "a@example.com", "password": "short"}),
        json!({"email": "a@example.com"}),
        json!({"email": 42, "password": "long enough"}),
        json!({"email": "a\0b@example.com", "password": "long enough"}),
        json!("a@example.com"),
    ] {
        let res = app.post_json("/account/v1/signup", &body).await;
        assert_eq!(res.status(), 422, "{body}");
        assert_error(res, 422, "VALIDATION_FAILED").await;
    }
}

#[tokio::test]
async fn malformed_bodies_get_json_errors_never_a_500() {
    let app = spawn_app().await;
    let url = app.url("/account/v1/signup");
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            app.client
                .post(&url)
                .header("content-type", "application/json")
                .body("{\"email\": "),
            400,
            "MALFORMED_JSON",
        ),
        (
            app.client
                .post(&url)
                .header("content-type", "text/plain")
                .body("{}"),
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            app.client.post(&url).body("{}"),
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            app.client
                .post(&url)
                .header("content-type", "application/json")
                .body(format!(
                    "{{\"email\": \"{}\", \"password\": \"x\"}}",
                    "a".repeat(64 * 1024)
                )),
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            app.client
                .post(&url)
                .header("content-type", "application/json")
                .body(vec![0xff, 0xfe, 0x7b]),
            400,
            "MALFORMED_JSON",
        ),
    ];
    for (request, status, code) in cases {
        let res = request.send().await.unwrap();
        assert_error(res, status, code).await;
    }
}

#[tokio::test]
async fn login_gives_an_expiring_session_and_refuses_wrong_credentials() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app
        .post_json(
            "/account/v1/login",
            &json!({"email": customer.email, "password": customer.password}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert!(body["token"].as_str().unwrap().starts_with("tgs_"));
    let expires: chrono::DateTime<chrono::Utc> =
        body["expires_at"].as_str().unwrap().parse().unwrap();
    let hours = (expires - chrono::Utc::now()).num_minutes() as f64 / 60.0;
    assert!((23.9..=24.0).contains(&hours), "{hours}");

    for body in [
        json!({"email": customer.email, "password": "wrong password"}),
        json!({"email": "nobody@example.com", "password": customer.password}),
        json!({"email": "nul\0@example.com", "password": customer.password}),
    ] {
        let res = app.post_json("/account/v1/login", &body).await;
        assert_error(res, 401, "INVALID_CREDENTIALS").await;
    }
}
