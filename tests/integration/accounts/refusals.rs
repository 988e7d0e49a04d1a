//! Refusals in the product's words (SPEC §21): the documented JSON error (or the page)
//! with a message that names the field, never a parser's or the framework's text.

use serde_json::{Value, json};

use crate::common::*;

/// The error body of `res`, which must have `status` and `code`.
async fn refusal(res: reqwest::Response, status: u16, code: &str) -> String {
    assert_eq!(res.status(), status);
    let body: Value = res.json().await.expect("a JSON error body");
    assert_eq!(body["code"], code, "{body}");
    let message = body["message"].as_str().unwrap().to_owned();
    for framework in [
        "Failed to",
        "deserialize",
        "serde",
        "expected a string",
        "line 1 column",
    ] {
        assert!(!message.contains(framework), "{message}");
    }
    message
}

#[tokio::test]
async fn a_field_of_the_wrong_type_or_missing_is_named_in_plain_words() {
    let app = spawn_app().await;
    let res = app
        .post_json(
            "/account/v1/signup",
            &json!({"email": 5, "password": "long enough"}),
        )
        .await;
    let message = refusal(res, 422, "VALIDATION_FAILED").await;
    assert_eq!(message, "email must be text");

    let res = app
        .post_json("/account/v1/login", &json!({"email": "a@example.com"}))
        .await;
    assert_eq!(
        refusal(res, 422, "VALIDATION_FAILED").await,
        "password is required"
    );

    let res = app
        .admin_post(
            "/admin/v1/accounts/1/grants",
            &json!({"calls": "many", "expires_at": null}),
        )
        .await;
    let message = refusal(res, 422, "VALIDATION_FAILED").await;
    assert!(message.starts_with("calls must be"), "{message}");
}

#[tokio::test]
async fn a_body_that_is_not_json_says_where_it_goes_wrong() {
    let app = spawn_app().await;
    let res = app
        .client
        .post(app.url("/account/v1/signup"))
        .header("content-type", "application/json")
        .body("{\"email\": ")
        .send()
        .await
        .unwrap();
    let message = refusal(res, 400, "MALFORMED_JSON").await;
    assert!(message.contains("line 1, column"), "{message}");
}

#[tokio::test]
async fn unknown_fields_are_refused_on_signup_and_login_as_everywhere() {
    let app = spawn_app().await;
    let res = app
        .post_json(
            "/account/v1/signup",
            &json!({"email": "new@example.com", "password": "long enough", "admin": true}),
        )
        .await;
    let message = refusal(res, 422, "VALIDATION_FAILED").await;
    assert!(message.starts_with("admin is not a field"), "{message}");
    // Nothing was created: the same email signs up afterwards.
    let res = app
        .post_json(
            "/account/v1/signup",
            &json!({"email": "new@example.com", "password": "long enough"}),
        )
        .await;
    assert_eq!(res.status(), 201);

    let res = app
        .post_json(
            "/account/v1/login",
            &json!({"email": "new@example.com", "password": "long enough", "remember": 1}),
        )
        .await;
    refusal(res, 422, "VALIDATION_FAILED").await;
}

#[tokio::test]
async fn an_api_key_sent_as_a_bearer_token_is_told_where_it_goes() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let res = app
        .client
        .get(app.url("/vedic/v1/horoscope/daily"))
        .bearer_auth(&customer.api_key)
        .send()
        .await
        .unwrap();
    let message = refusal(res, 401, "INVALID_API_KEY").await;
    assert!(message.contains("x-api-key header"), "{message}");
    assert!(
        !message.contains(&customer.api_key),
        "the key is never echoed"
    );
    assert!(app.upstream.recorded().is_empty());
}

#[tokio::test]
async fn too_many_or_too_large_headers_get_431_with_the_json_body() {
    let app = spawn_app().await;
    let mut many = app.client.get(app.url("/healthz"));
    for i in 0..200 {
        many = many.header(format!("x-filler-{i}"), "1");
    }
    refusal(many.send().await.unwrap(), 431, "HEADERS_TOO_LARGE").await;

    let customer = app.signup().await;
    let res = app
        .client
        .get(app.url("/vedic/v1/horoscope/daily"))
        .header("x-api-key", &customer.api_key)
        .header("x-big", "v".repeat(40 * 1024))
        .send()
        .await
        .unwrap();
    refusal(res, 431, "HEADERS_TOO_LARGE").await;
    assert!(app.upstream.recorded().is_empty(), "never forwarded");
}

#[tokio::test]
async fn an_oversized_portal_form_is_413_in_words() {
    let app = spawn_app().await;
    let res = app
        .client
        .post(app.url("/portal/sign-in"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("email={}&password=x", "a".repeat(20 * 1024)))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    let page = res.text().await.unwrap();
    assert!(page.contains("The form is too large."), "{page}");
    assert!(!page.contains("Failed to buffer"), "{page}");
}

/// serde's structs would also read an array of their fields in order; every JSON body of
/// the account and admin APIs must be an object.
#[tokio::test]
async fn a_body_that_is_an_array_of_the_fields_is_refused_everywhere() {
    let app = spawn_app().await;
    let res = app
        .post_json(
            "/account/v1/signup",
            &serde_json::json!(["array@example.com", "correct horse battery"]),
        )
        .await;
    assert_error(res, 422, "VALIDATION_FAILED").await;
    let customer = app.signup().await;
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/grants", customer.account_id),
            &serde_json::json!([100, null]),
        )
        .await;
    assert_error(res, 422, "VALIDATION_FAILED").await;
    assert_eq!(app.usage_of(customer.account_id).await["credits"], 0);
}
