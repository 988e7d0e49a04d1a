//! Key names, expiry, scopes and rolling (SPEC §15).

use super::*;
use crate::common::*;

#[tokio::test]
async fn a_key_is_made_with_a_name_an_expiry_and_scopes_and_listed_with_them() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let expires = (Utc::now() + chrono::Duration::days(30)).to_rfc3339();
    let (key_id, _) = new_key(
        &app,
        &token,
        json!({"name": "ci runner", "expires_at": expires, "scopes": ["/vedic/v1/chart"],
               "rate_limit": {"per_second": 5, "burst": 10}}),
    )
    .await;
    let key = listed(&app, &token, key_id).await;
    assert_eq!(key["name"], "ci runner");
    let listed_expiry: DateTime<Utc> = key["expires_at"].as_str().unwrap().parse().unwrap();
    let asked: DateTime<Utc> = expires.parse().unwrap();
    assert!(
        (listed_expiry - asked).num_milliseconds().abs() < 1,
        "{key}"
    );
    assert_eq!(key["scopes"], json!(["/vedic/v1/chart"]));
    assert_eq!(key["rate_limit"], json!({"per_second": 5, "burst": 10}));
    assert_eq!(key["last_used_at"], Value::Null);

    // Signup's key: named `default`, no expiry, both prefixes.
    let first = listed(&app, &token, customer.key_id).await;
    assert_eq!(first["name"], "default");
    assert_eq!(first["expires_at"], Value::Null);
    assert_eq!(first["scopes"], json!(["/vedic/v1/", "/western/v1/"]));
    assert_eq!(first["rate_limit"], Value::Null);
}

#[tokio::test]
async fn bad_key_fields_are_refused_naming_the_field() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let past = (Utc::now() - chrono::Duration::minutes(1)).to_rfc3339();
    for (body, field) in [
        (json!({"name": ""}), "name"),
        (json!({"name": "x".repeat(65)}), "name"),
        (json!({"name": "tab\there"}), "name"),
        (json!({"expires_at": past}), "expires_at"),
        (json!({"scopes": []}), "scopes"),
        (json!({"scopes": ["/lunar/v1/"]}), "scopes"),
        (json!({"scopes": ["/vedic/v1/../admin"]}), "scopes"),
        (json!({"scopes": ["/vedic/v1/chart?x=1"]}), "scopes"),
        (
            json!({"rate_limit": {"per_second": 0}}),
            "rate_limit.per_second",
        ),
        (
            json!({"rate_limit": {"per_second": 100001}}),
            "rate_limit.per_second",
        ),
        (
            json!({"rate_limit": {"per_second": 10, "burst": 5}}),
            "rate_limit.burst",
        ),
    ] {
        let res = send(
            &app,
            Method::POST,
            "/account/v1/keys",
            &token,
            Some(body.clone()),
        )
        .await;
        assert_eq!(res.status(), 422, "{body}");
        let error: Value = res.json().await.unwrap();
        assert_eq!(error["code"], "VALIDATION_FAILED", "{body}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
    }
    let res = send(
        &app,
        Method::POST,
        "/account/v1/keys",
        &token,
        Some(json!({"label": "x"})),
    )
    .await;
    assert_eq!(res.status(), 422, "unknown fields are refused");
}

#[tokio::test]
async fn an_expired_key_is_refused_with_its_own_code_and_never_forwarded() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let soon = (Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let (key_id, key) = new_key(&app, &token, json!({"expires_at": soon})).await;
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let res = app.call(DAILY, &key).await;
    assert_eq!(res.status(), 401);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code": "KEY_EXPIRED", "message": "This API key has expired."})
    );
    assert_eq!(
        app.upstream.recorded().len(),
        1,
        "the expired call was not forwarded"
    );
    // Revoked and unknown keys keep their code.
    let res = send(
        &app,
        Method::DELETE,
        &format!("/account/v1/keys/{key_id}"),
        &token,
        None,
    )
    .await;
    assert_eq!(res.status(), 204);
    assert_error(app.call(DAILY, &key).await, 401, "INVALID_API_KEY").await;
    assert_error(
        app.call(DAILY, "tgk_unknownunknownunknownunknownunknown12")
            .await,
        401,
        "INVALID_API_KEY",
    )
    .await;
}

#[tokio::test]
async fn a_scoped_key_calls_only_its_paths_and_others_are_refused_unforwarded() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (_, key) = new_key(&app, &token, json!({"scopes": ["/vedic/v1/horoscope"]})).await;
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    assert_eq!(app.call("/vedic/v1/horoscope", &key).await.status(), 200);
    for path in ["/vedic/v1/horoscopes", "/vedic/v1/chart", SYNASTRY] {
        let res = app.call(path, &key).await;
        assert_eq!(res.status(), 403, "{path}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(
            body,
            json!({"code": "KEY_SCOPE_DENIED", "message": "This API key may not call this path."})
        );
    }
    assert_eq!(app.upstream.recorded().len(), 2);
    app.wait_for_ledger(customer.account_id, 2).await;
    let report = app.usage_of(customer.account_id).await;
    assert_eq!(report["used"], 2, "refused calls are not accounted");
}

#[tokio::test]
async fn changing_scopes_or_expiry_holds_on_the_next_call() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (key_id, key) = new_key(&app, &token, json!({})).await;
    assert_eq!(app.call(SYNASTRY, &key).await.status(), 200);
    let path = format!("/account/v1/keys/{key_id}");
    let res = send(
        &app,
        Method::PATCH,
        &path,
        &token,
        Some(json!({"scopes": ["/vedic/v1/"], "name": "vedic only"})),
    )
    .await;
    assert_eq!(res.status(), 200);
    let key_now: Value = res.json().await.unwrap();
    assert_eq!(key_now["name"], "vedic only");
    assert_eq!(key_now["scopes"], json!(["/vedic/v1/"]));
    assert_error(app.call(SYNASTRY, &key).await, 403, "KEY_SCOPE_DENIED").await;
    assert_eq!(app.call(DAILY, &key).await.status(), 200);
    // Scopes back to both with null; a name is never null.
    let res = send(
        &app,
        Method::PATCH,
        &path,
        &token,
        Some(json!({"scopes": null})),
    )
    .await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.call(SYNASTRY, &key).await.status(), 200);
    assert_error(
        send(
            &app,
            Method::PATCH,
            &path,
            &token,
            Some(json!({"name": null})),
        )
        .await,
        422,
        "VALIDATION_FAILED",
    )
    .await;
    assert_error(
        send(&app, Method::PATCH, &path, &token, Some(json!({}))).await,
        422,
        "VALIDATION_FAILED",
    )
    .await;
}

#[tokio::test]
async fn a_rolled_key_replaces_the_old_one_which_works_through_its_grace() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let (old_id, old) = new_key(
        &app,
        &token,
        json!({"name": "backend", "scopes": ["/vedic/v1/"], "monthly_limit": 100,
               "rate_limit": {"per_second": 50}}),
    )
    .await;
    let before = Utc::now();
    let res = send(
        &app,
        Method::POST,
        &format!("/account/v1/keys/{old_id}/roll"),
        &token,
        Some(json!({"grace_seconds": 2})),
    )
    .await;
    assert_eq!(res.status(), 201);
    assert_eq!(res.headers()["cache-control"], "no-store");
    let rolled: Value = res.json().await.unwrap();
    assert_eq!(rolled["replaces"], old_id);
    let new_id = rolled["key_id"].as_i64().unwrap();
    let new = rolled["api_key"].as_str().unwrap().to_owned();
    let old_end: DateTime<Utc> = rolled["old_key_expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let grace = (old_end - before).num_milliseconds();
    assert!((1_500..=2_500).contains(&grace), "{grace} ms");

    // The new key has the old one's name, scopes and limits.
    let listed_new = listed(&app, &token, new_id).await;
    assert_eq!(listed_new["name"], "backend");
    assert_eq!(listed_new["scopes"], json!(["/vedic/v1/"]));
    assert_eq!(listed_new["monthly_limit"], 100);
    assert_eq!(
        listed_new["rate_limit"],
        json!({"per_second": 50, "burst": 50})
    );
    assert_eq!(listed_new["expires_at"], Value::Null);

    // Both work during the grace; then only the new one.
    assert_eq!(app.call(DAILY, &old).await.status(), 200);
    assert_eq!(app.call(DAILY, &new).await.status(), 200);
    assert_error(app.call(SYNASTRY, &new).await, 403, "KEY_SCOPE_DENIED").await;
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    assert_error(app.call(DAILY, &old).await, 401, "KEY_EXPIRED").await;
    assert_eq!(app.call(DAILY, &new).await.status(), 200);

    // An expired or revoked key cannot be rolled; another account's key is not found.
    let roll = |id: i64| format!("/account/v1/keys/{id}/roll");
    assert_error(
        send(&app, Method::POST, &roll(old_id), &token, None).await,
        409,
        "KEY_INACTIVE",
    )
    .await;
    let res = send(
        &app,
        Method::DELETE,
        &format!("/account/v1/keys/{new_id}"),
        &token,
        None,
    )
    .await;
    assert_eq!(res.status(), 204);
    assert_error(
        send(&app, Method::POST, &roll(new_id), &token, None).await,
        409,
        "KEY_INACTIVE",
    )
    .await;
    let other = app.signup().await;
    let other_token = app.login(&other).await;
    assert_error(
        send(
            &app,
            Method::POST,
            &roll(customer.key_id),
            &other_token,
            None,
        )
        .await,
        404,
        "KEY_NOT_FOUND",
    )
    .await;
    assert_error(
        send(
            &app,
            Method::POST,
            &roll(customer.key_id),
            &token,
            Some(json!({"grace_seconds": 604801})),
        )
        .await,
        422,
        "VALIDATION_FAILED",
    )
    .await;
}

#[tokio::test]
async fn rolling_without_a_body_gives_the_old_key_a_day() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let res = send(
        &app,
        Method::POST,
        &format!("/account/v1/keys/{}/roll", customer.key_id),
        &token,
        None,
    )
    .await;
    assert_eq!(res.status(), 201);
    let rolled: Value = res.json().await.unwrap();
    let end: DateTime<Utc> = rolled["old_key_expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let grace = (end - Utc::now()).num_seconds();
    assert!((86_390..=86_400).contains(&grace), "{grace}");
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    let old = listed(&app, &token, customer.key_id).await;
    assert_eq!(old["expires_at"], rolled["old_key_expires_at"]);
}

#[tokio::test]
async fn last_used_at_follows_the_calls_through_a_key() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let before = Utc::now() - chrono::Duration::seconds(1);
    assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    // What the replica recorded is written on its next flush (every 30 s) and at stop.
    app.state.last_used.flush(&app.db.pool).await.unwrap();
    let key = listed(&app, &token, customer.key_id).await;
    let used: DateTime<Utc> = key["last_used_at"].as_str().expect("set").parse().unwrap();
    assert!(used >= before && used <= Utc::now(), "{used}");
}

#[tokio::test]
async fn an_expiry_set_on_one_replica_holds_on_another_within_a_second() {
    let first = spawn_app().await;
    let customer = first.signup().await;
    let token = first.login(&customer).await;
    let config = test_config(&first.db, &first.upstream);
    let second = spawn_replica(first.db.clone(), first.upstream.clone(), config).await;
    // The second replica caches the key.
    assert_eq!(second.call(DAILY, &customer.api_key).await.status(), 200);
    let soon = (Utc::now() + chrono::Duration::milliseconds(300)).to_rfc3339();
    let path = format!("/account/v1/keys/{}", customer.key_id);
    let res = send(
        &first,
        Method::PATCH,
        &path,
        &token,
        Some(json!({"expires_at": soon})),
    )
    .await;
    assert_eq!(res.status(), 200);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_error(
        second.call(DAILY, &customer.api_key).await,
        401,
        "KEY_EXPIRED",
    )
    .await;

    // A scope set on the first replica, and a roll, hold on the second within a second.
    let (key_id, key) = new_key(&first, &token, json!({})).await;
    assert_eq!(second.call(SYNASTRY, &key).await.status(), 200);
    let path = format!("/account/v1/keys/{key_id}");
    let res = send(
        &first,
        Method::PATCH,
        &path,
        &token,
        Some(json!({"scopes": ["/vedic/v1/"]})),
    )
    .await;
    assert_eq!(res.status(), 200);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_error(second.call(SYNASTRY, &key).await, 403, "KEY_SCOPE_DENIED").await;
    let roll = format!("/account/v1/keys/{key_id}/roll");
    let res = send(
        &first,
        Method::POST,
        &roll,
        &token,
        Some(json!({"grace_seconds": 0})),
    )
    .await;
    assert_eq!(res.status(), 201);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_error(second.call(DAILY, &key).await, 401, "KEY_EXPIRED").await;
}

#[tokio::test]
async fn an_expired_key_is_not_changed_back_to_life_and_rolls_respect_the_key_limit() {
    let app = spawn_app_with(|c| c.account.max_keys = 2).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let soon = (Utc::now() + chrono::Duration::milliseconds(500)).to_rfc3339();
    let (expiring, _) = new_key(&app, &token, json!({"expires_at": soon})).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let path = format!("/account/v1/keys/{expiring}");
    let res = send(
        &app,
        Method::PATCH,
        &path,
        &token,
        Some(json!({"expires_at": null})),
    )
    .await;
    assert_error(res, 409, "KEY_INACTIVE").await;
    // The expired key no longer counts: a second live key fits.
    let (second, _) = new_key(&app, &token, json!({})).await;
    // Rolling one of two live keys at a limit of two: the other one and the new one.
    let roll = |id: i64| format!("/account/v1/keys/{id}/roll");
    let res = send(&app, Method::POST, &roll(second), &token, None).await;
    assert_eq!(res.status(), 201);
    let rolled: Value = res.json().await.unwrap();
    // Rolling the new key again would leave three live keys besides the one replaced.
    let newest = rolled["key_id"].as_i64().unwrap();
    assert_error(
        send(&app, Method::POST, &roll(newest), &token, None).await,
        409,
        "KEY_LIMIT",
    )
    .await;
}
