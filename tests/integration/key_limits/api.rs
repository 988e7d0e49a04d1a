//! The account API of key limits: create, PATCH, list, validation, other accounts.

use super::*;
use crate::common::*;

#[tokio::test]
async fn a_key_created_with_a_limit_lists_it_and_a_patch_sets_and_clears_it() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (limited, _) = new_key(&app, &token, Some(json!({"monthly_limit": 7}))).await;
    let (plain, _) = new_key(&app, &token, None).await;

    let item = listed(&app, &token, limited).await;
    assert_eq!(item["monthly_limit"], 7);
    assert_eq!(item["used"], 0);
    assert_eq!(
        listed(&app, &token, plain).await["monthly_limit"],
        Value::Null
    );
    assert_eq!(
        listed(&app, &token, customer.key_id).await["monthly_limit"],
        Value::Null,
        "the signup key has no limit"
    );

    let path = format!("/account/v1/keys/{plain}");
    let res = send(
        &app,
        Method::PATCH,
        &path,
        &token,
        Some(json!({"monthly_limit": 0})),
    )
    .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        (body["key_id"].as_i64(), body["monthly_limit"].as_i64()),
        (Some(plain), Some(0))
    );
    assert_eq!(listed(&app, &token, plain).await["monthly_limit"], 0);

    let res = send(
        &app,
        Method::PATCH,
        &path,
        &token,
        Some(json!({"monthly_limit": null})),
    )
    .await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        listed(&app, &token, plain).await["monthly_limit"],
        Value::Null
    );
}

/// A limit written as a whole float (`5.0`, as some clients serialise every number) is
/// the integer it names, as the document's `integer` type says; on create and on PATCH.
#[tokio::test]
async fn a_limit_written_as_a_whole_float_is_that_integer() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (key_id, _) = new_key(&app, &token, Some(json!({"monthly_limit": 5.0}))).await;
    assert_eq!(listed(&app, &token, key_id).await["monthly_limit"], 5);
    let res = set_limit(&app, &token, key_id, json!(2e1)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(listed(&app, &token, key_id).await["monthly_limit"], 20);
}

#[tokio::test]
async fn bad_limits_are_refused_and_change_nothing() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    for body in [
        json!({"monthly_limit": -1}),
        json!({"monthly_limit": 1.5}),
        json!({"monthly_limit": "10"}),
        json!({"monthly_limit": 10, "other": 1}),
    ] {
        let res = send(
            &app,
            Method::POST,
            "/account/v1/keys",
            &token,
            Some(body.clone()),
        )
        .await;
        assert_error(res, 422, "VALIDATION_FAILED").await;
    }
    let path = format!("/account/v1/keys/{}", customer.key_id);
    for body in [
        json!({}),
        json!({"monthly_limit": -5}),
        json!({"monthly_limit": true}),
    ] {
        let res = send(&app, Method::PATCH, &path, &token, Some(body)).await;
        assert_error(res, 422, "VALIDATION_FAILED").await;
    }
    let keys = send(&app, Method::GET, "/account/v1/keys", &token, None).await;
    let keys: Vec<Value> = keys.json().await.unwrap();
    assert_eq!(keys.len(), 1, "no key was made");
    assert_eq!(keys[0]["monthly_limit"], Value::Null);
}

#[tokio::test]
async fn another_accounts_key_cannot_be_limited() {
    let app = spawn_app().await;
    let owner = app.signup().await;
    let other = app.signup().await;
    let token = app.login(&other).await;
    let body = Some(json!({"monthly_limit": 0}));
    let path = format!("/account/v1/keys/{}", owner.key_id);
    let res = send(&app, Method::PATCH, &path, &token, body.clone()).await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
    let res = send(
        &app,
        Method::PATCH,
        "/account/v1/keys/999999",
        &token,
        body.clone(),
    )
    .await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
    let res = app
        .client
        .patch(app.url(&path))
        .json(&json!({"monthly_limit": 0}))
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
    // The owner's key still calls through.
    assert_eq!(app.call(DAILY, &owner.api_key).await.status(), 200);
}

/// A revoked key takes no limit: PATCH answers 404 as for a key that does not exist,
/// and the listed key keeps the limit it had.
#[tokio::test]
async fn a_revoked_keys_limit_cannot_be_changed() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (key_id, _) = new_key(&app, &token, Some(json!({"monthly_limit": 4}))).await;
    let path = format!("/account/v1/keys/{key_id}");
    let res = send(&app, Method::DELETE, &path, &token, None).await;
    assert!(res.status().is_success(), "{}", res.status());
    let res = set_limit(&app, &token, key_id, Value::Null).await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
    let item = listed(&app, &token, key_id).await;
    assert!(item["revoked_at"].is_string(), "{item}");
    assert_eq!(item["monthly_limit"], 4);
}

#[tokio::test]
async fn a_key_body_that_is_not_json_is_refused_with_a_json_error() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let post = || {
        app.client
            .post(app.url("/account/v1/keys"))
            .bearer_auth(&token)
    };
    let res = post()
        .header("content-type", "text/plain")
        .body(r#"{"monthly_limit": 1}"#)
        .send()
        .await
        .unwrap();
    assert_error(res, 415, "UNSUPPORTED_MEDIA_TYPE").await;
    let res = post()
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_error(res, 400, "MALFORMED_JSON").await;
    let res = post()
        .header("content-type", "application/json")
        .body(vec![b' '; 20 * 1024])
        .send()
        .await
        .unwrap();
    assert_error(res, 413, "PAYLOAD_TOO_LARGE").await;
    // No body at all, or a JSON null, still makes a key without a limit.
    assert_eq!(post().send().await.unwrap().status(), 201);
    let res = post()
        .header("content-type", "application/json")
        .body("null")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    let key_id = created["key_id"].as_i64().expect("key_id");
    assert_eq!(
        listed(&app, &token, key_id).await["monthly_limit"],
        Value::Null
    );
}
