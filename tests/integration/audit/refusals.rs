//! What the audit log never holds: a row of a change that failed, and a secret. And
//! what it refuses: any change to a row already written.

use sha2::Digest;

use super::*;
use crate::billing::{SECRET, checkout, with_catalogue};
use crate::common::*;

#[tokio::test]
async fn a_change_that_fails_leaves_no_row() {
    let app = audit_app(|c| {
        with_catalogue(c);
        c.account.max_keys = 2;
    })
    .await;
    let ann = app.signup().await;
    let bob = app.signup().await;
    let token = app.login(&ann).await;
    let (revoked_path, revoked_roll) = {
        let res = send(&app, Method::POST, "/account/v1/keys", &token, None).await;
        assert_eq!(res.status(), 201);
        let key: Value = res.json().await.unwrap();
        let id = key["key_id"].as_i64().unwrap();
        let path = format!("/account/v1/keys/{id}");
        assert_eq!(
            send(&app, Method::DELETE, &path, &token, None)
                .await
                .status(),
            204
        );
        (path.clone(), format!("{path}/roll"))
    };
    let before = rows(&app).await;

    // Bob's key, through Ann's session: not found, whatever is asked.
    let bobs = format!("/account/v1/keys/{}", bob.key_id);
    let patch = json!({"monthly_limit": 5});
    let res = send(&app, Method::PATCH, &bobs, &token, Some(patch.clone())).await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
    let res = send(&app, Method::DELETE, &bobs, &token, None).await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
    let res = send(&app, Method::POST, &format!("{bobs}/roll"), &token, None).await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
    // Ann's revoked key: neither changed nor rolled.
    let res = send(&app, Method::PATCH, &revoked_path, &token, Some(patch)).await;
    assert_error(res, 404, "KEY_NOT_FOUND").await;
    let res = send(&app, Method::POST, &revoked_roll, &token, None).await;
    assert_error(res, 409, "KEY_INACTIVE").await;
    // Past `account.max_keys`, and a refused field.
    let res = send(&app, Method::POST, "/account/v1/keys", &token, None).await;
    assert_eq!(res.status(), 201);
    let res = send(&app, Method::POST, "/account/v1/keys", &token, None).await;
    assert_error(res, 409, "KEY_LIMIT").await;
    let bad = json!({"name": ""});
    let res = send(&app, Method::POST, "/account/v1/keys", &token, Some(bad)).await;
    assert_error(res, 422, "VALIDATION_FAILED").await;
    let after_create = rows(&app).await;
    assert_eq!(after_create, before + 1, "only the one key made");

    // An unknown account: no subscription, no top-up.
    let nobody = "/admin/v1/accounts/999999999";
    let res = app
        .admin_post(
            &format!("{nobody}/grants"),
            &json!({"calls": 10, "expires_at": null}),
        )
        .await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
    let res = app
        .admin_post(&format!("{nobody}/subscriptions"), &json!({"plan": "pro"}))
        .await;
    assert_error(res, 404, "ACCOUNT_NOT_FOUND").await;
    // An unknown code, and a used one.
    let res = send(
        &app,
        Method::POST,
        "/account/v1/redeem",
        &token,
        Some(json!({"code": "tgr_unknownunknownunknownunknownunknown1234"})),
    )
    .await;
    assert_error(res, 404, "CODE_NOT_FOUND").await;
    // A payment for an account that does not exist is recorded as such, not applied.
    let stray = checkout("evt_stray", "999999999", "pro", "cus_stray");
    assert_eq!(app.send_event(&stray).await, "unknown_account");
    assert_eq!(rows(&app).await, after_create);
}

#[tokio::test]
async fn no_secret_appears_in_any_row() {
    let app = audit_app(with_catalogue).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let mut api_keys = vec![customer.api_key.clone()];
    let res = send(
        &app,
        Method::POST,
        "/account/v1/keys",
        &token,
        Some(json!({"name": "second"})),
    )
    .await;
    let created: Value = res.json().await.unwrap();
    api_keys.push(created["api_key"].as_str().unwrap().to_owned());
    let roll = format!("/account/v1/keys/{}/roll", created["key_id"]);
    let res = send(&app, Method::POST, &roll, &token, None).await;
    assert_eq!(res.status(), 201);
    let rolled: Value = res.json().await.unwrap();
    api_keys.push(rolled["api_key"].as_str().unwrap().to_owned());
    let res = app
        .admin_post(
            "/admin/v1/codes",
            &json!({"plan": "pro", "months": 1, "count": 1, "expires_at": null}),
        )
        .await;
    let minted: Value = res.json().await.unwrap();
    let code = minted["codes"][0].as_str().unwrap().to_owned();
    let res = send(
        &app,
        Method::POST,
        "/account/v1/redeem",
        &token,
        Some(json!({"code": code})),
    )
    .await;
    assert_eq!(res.status(), 201);
    let paid = checkout(
        "evt_secret",
        &customer.account_id.to_string(),
        "pro",
        "cus_x",
    );
    assert_eq!(app.send_event(&paid).await, "activated");

    // Everything the log shows, through both APIs and as stored.
    let everything = admin_audit(&app, "?limit=200").await.to_string();
    let own = send(
        &app,
        Method::GET,
        "/account/v1/audit?limit=200",
        &token,
        None,
    )
    .await;
    let own = own.text().await.unwrap();
    let stored: String = sqlx::query_scalar(
        "SELECT string_agg(concat_ws(' ', actor, action, target, detail::text, host(ip)), ' ')
         FROM audit_event",
    )
    .fetch_one(&app.db.pool)
    .await
    .unwrap();
    assert!(stored.contains("key.rolled") && stored.contains("code.redeemed"));
    let hashes: Vec<String> = sqlx::query_scalar(
        "SELECT encode(key_hash, 'hex') FROM api_key
         UNION ALL SELECT encode(code_hash, 'hex') FROM redemption_code
         UNION ALL SELECT encode(token_hash, 'hex') FROM account_session
         UNION ALL SELECT password_hash FROM account",
    )
    .fetch_all(&app.db.pool)
    .await
    .unwrap();
    let mut secrets = api_keys.clone();
    secrets.extend(
        api_keys
            .iter()
            .map(|k| hex::encode(sha2::Sha256::digest(k.as_bytes()))),
    );
    secrets.extend(hashes);
    secrets.extend([
        customer.password.clone(),
        token.clone(),
        code.clone(),
        SECRET.to_owned(),
        ADMIN_TOKEN.to_owned(),
    ]);
    for text in [&everything, &own, &stored] {
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()), "{secret} in {text}");
        }
    }
}

#[tokio::test]
async fn rows_already_written_cannot_be_changed_or_deleted() {
    let app = audit_app(|_| {}).await;
    let customer = app.signup().await;
    let before = rows(&app).await;
    assert_eq!(before, 2);
    for statement in [
        "UPDATE audit_event SET actor = 'admin' WHERE account_id = $1",
        "UPDATE audit_event SET detail = '{}' WHERE account_id = $1",
        "DELETE FROM audit_event WHERE account_id = $1",
    ] {
        let refused = sqlx::query(statement)
            .bind(customer.account_id)
            .execute(&app.db.pool)
            .await;
        let Err(sqlx::Error::Database(e)) = refused else {
            panic!("{statement} was not refused");
        };
        assert!(e.message().contains("append-only"), "{statement}: {e}");
    }
    {
        let statement = "TRUNCATE audit_event";
        let refused = sqlx::query(statement).execute(&app.db.pool).await;
        let Err(sqlx::Error::Database(e)) = refused else {
            panic!("{statement} was not refused");
        };
        assert!(e.message().contains("append-only"), "{statement}: {e}");
    }
    assert_eq!(rows(&app).await, before);
    let events = events_of(&app, customer.account_id).await;
    assert!(events.iter().all(|e| e["actor"] != "admin"), "{events:?}");
    // Deleting the account keeps its rows: they name it still.
    sqlx::query("DELETE FROM account WHERE id = $1")
        .bind(customer.account_id)
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(events_of(&app, customer.account_id).await.len(), 2);
}
