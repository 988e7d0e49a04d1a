//! Each change of §19 writes one row, with who asked, from where, and what changed.

use super::*;
use crate::billing::{checkout, invoice_paid, subscription_deleted, with_catalogue};
use crate::common::*;

#[tokio::test]
async fn signup_records_its_key_as_the_accounts_and_its_free_plan_as_the_systems() {
    let app = audit_app(|_| {}).await;
    let customer = app.signup().await;
    let events = events_of(&app, customer.account_id).await;
    assert_eq!(events.len(), 2, "{events:?}");
    let key = the_event(&app, customer.account_id, "key.created").await;
    let target = format!("key:{}", customer.key_id);
    assert_event(&key, "account", "key.created", &target, Some("127.0.0.1"));
    assert_eq!(key["account_id"], customer.account_id);
    assert_eq!(key["detail"]["name"], "default");
    assert_eq!(key["detail"]["scopes"], Value::Null);
    assert_eq!(key["detail"]["prefix"], customer.api_key[..12]);
    let free = the_event(&app, customer.account_id, "subscription.activated").await;
    assert_eq!(free["actor"], "system");
    assert_eq!(free["ip"], Value::Null);
    assert_eq!(free["detail"]["plan"], "free");
    assert!(
        free["target"]
            .as_str()
            .unwrap()
            .starts_with("subscription:")
    );
}

#[tokio::test]
async fn every_change_of_a_key_writes_one_row_of_the_account_from_its_address() {
    let app = audit_app(|_| {}).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let account = customer.account_id;

    let res = send(
        &app,
        Method::POST,
        "/account/v1/keys",
        &token,
        Some(
            json!({"name": "ci", "scopes": ["/vedic/v1/"], "monthly_limit": 100,
                    "rate_limit": {"per_second": 5}}),
        ),
    )
    .await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    let key_id = created["key_id"].as_i64().unwrap();
    let target = format!("key:{key_id}");
    let made = actions_of(&app, account, "key.created").await;
    assert_eq!(made.len(), 2, "signup's key and this one");
    assert_event(&made[0], "account", "key.created", &target, Some(FORWARDED));
    assert_eq!(
        made[0]["detail"],
        json!({"name": "ci", "prefix": created["api_key"].as_str().unwrap()[..12],
               "expires_at": null, "scopes": ["/vedic/v1/"], "monthly_limit": 100,
               "rate_limit": {"per_second": 5, "burst": 5}})
    );

    // A PATCH records the parts it changed, a cleared one as null.
    let path = format!("/account/v1/keys/{key_id}");
    let body = json!({"name": "ci runner", "monthly_limit": null, "scopes": null});
    let res = send(&app, Method::PATCH, &path, &token, Some(body)).await;
    assert_eq!(res.status(), 200);
    let changed = the_event(&app, account, "key.changed").await;
    assert_event(&changed, "account", "key.changed", &target, Some(FORWARDED));
    assert_eq!(
        changed["detail"],
        json!({"name": "ci runner", "monthly_limit": null, "scopes": null})
    );
    let body = json!({"rate_limit": {"per_second": 2, "burst": 4}});
    let res = send(&app, Method::PATCH, &path, &token, Some(body)).await;
    assert_eq!(res.status(), 200);
    let changes = actions_of(&app, account, "key.changed").await;
    assert_eq!(changes.len(), 2);
    assert_eq!(
        changes[0]["detail"],
        json!({"rate_limit": {"per_second": 2, "burst": 4}})
    );

    // A roll is recorded against the old key, naming the new one.
    let roll = format!("/account/v1/keys/{key_id}/roll");
    let res = send(
        &app,
        Method::POST,
        &roll,
        &token,
        Some(json!({"grace_seconds": 60})),
    )
    .await;
    assert_eq!(res.status(), 201);
    let rolled: Value = res.json().await.unwrap();
    let event = the_event(&app, account, "key.rolled").await;
    assert_event(&event, "account", "key.rolled", &target, Some(FORWARDED));
    assert_eq!(event["detail"]["key_id"], rolled["key_id"]);
    assert_eq!(
        event["detail"]["prefix"],
        rolled["api_key"].as_str().unwrap()[..12]
    );
    assert_eq!(
        event["detail"]["old_key_expires_at"],
        rolled["old_key_expires_at"]
    );

    // Revoking records once; revoking again changes nothing and records nothing.
    for _ in 0..2 {
        let res = send(&app, Method::DELETE, &path, &token, None).await;
        assert_eq!(res.status(), 204);
    }
    let revoked = the_event(&app, account, "key.revoked").await;
    assert_event(&revoked, "account", "key.revoked", &target, Some(FORWARDED));
    assert_eq!(revoked["detail"]["name"], "ci runner");
    // signup (2), create, two changes, roll, revoke.
    assert_eq!(events_of(&app, account).await.len(), 7);
}

#[tokio::test]
async fn operators_subscriptions_and_top_ups_are_the_admins_and_a_redemption_the_accounts() {
    let app = audit_app(with_catalogue).await;
    let customer = app.signup().await;
    let account = customer.account_id;

    let res = app
        .client
        .post(app.url(&format!("/admin/v1/accounts/{account}/subscriptions")))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-forwarded-for", "198.51.100.9")
        .json(&json!({"plan": "pro"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let sub: Value = res.json().await.unwrap();
    let activated = actions_of(&app, account, "subscription.activated").await;
    assert_eq!(activated.len(), 2, "the free one and this one");
    let target = format!("subscription:{}", sub["subscription_id"]);
    assert_event(
        &activated[0],
        "admin",
        "subscription.activated",
        &target,
        Some("198.51.100.9"),
    );
    assert_eq!(activated[0]["detail"]["plan"], "pro");
    assert_eq!(activated[0]["detail"]["monthly_allowance"], 10_000);

    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{account}/grants"),
            &json!({"calls": 500, "expires_at": null}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let grant: Value = res.json().await.unwrap();
    let event = the_event(&app, account, "grant.added").await;
    let target = format!("grant:{}", grant["grant_id"]);
    assert_event(&event, "admin", "grant.added", &target, Some("127.0.0.1"));
    assert_eq!(event["detail"], json!({"calls": 500, "expires_at": null}));

    let res = app
        .admin_post(
            "/admin/v1/codes",
            &json!({"plan": "team", "months": 2, "count": 1, "expires_at": null}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let minted: Value = res.json().await.unwrap();
    let code = minted["codes"][0].as_str().unwrap();
    let token = app.login(&customer).await;
    let res = send(
        &app,
        Method::POST,
        "/account/v1/redeem",
        &token,
        Some(json!({"code": code})),
    )
    .await;
    assert_eq!(res.status(), 201);
    let redeemed: Value = res.json().await.unwrap();
    let event = the_event(&app, account, "code.redeemed").await;
    let target = format!("subscription:{}", redeemed["subscription_id"]);
    assert_event(&event, "account", "code.redeemed", &target, Some(FORWARDED));
    assert_eq!(event["detail"]["plan"], "team");
    assert!(event["detail"]["code_id"].as_i64().is_some(), "{event}");
    // Free, operator's, redeemed: the redemption is recorded once, as a redemption.
    assert_eq!(
        actions_of(&app, account, "subscription.activated")
            .await
            .len(),
        2
    );
}

#[tokio::test]
async fn payments_and_their_endings_are_stripes_once_per_event() {
    let app = audit_app(with_catalogue).await;
    let customer = app.signup().await;
    let account = customer.account_id;
    let checkout_event = checkout("evt_paid", &account.to_string(), "pro", "cus_audit");
    assert_eq!(app.send_event(&checkout_event).await, "activated");
    // A redelivery changes nothing, and records nothing.
    assert_eq!(app.send_event(&checkout_event).await, "duplicate");
    let now = chrono::Utc::now().timestamp();
    let invoice = invoice_paid("evt_invoice", "cus_audit", "price_team", now, now + 86_400);
    assert_eq!(app.send_event(&invoice).await, "activated");
    let paid = actions_of(&app, account, "payment.activated").await;
    assert_eq!(paid.len(), 2, "{paid:?}");
    for (event, (id, plan)) in paid
        .iter()
        .zip([("evt_invoice", "team"), ("evt_paid", "pro")])
    {
        assert_eq!(event["actor"], "stripe", "{event}");
        assert_eq!(event["ip"], "127.0.0.1", "{event}");
        assert_eq!(event["detail"]["event_id"], id, "{event}");
        assert_eq!(event["detail"]["customer"], "cus_audit", "{event}");
        assert_eq!(event["detail"]["plan"], plan, "{event}");
    }

    let ended = subscription_deleted("evt_deleted", "cus_audit", now + 60);
    assert_eq!(app.send_event(&ended).await, "ended");
    let endings = actions_of(&app, account, "subscription.ended").await;
    assert_eq!(endings.len(), 2, "both paid subscriptions end: {endings:?}");
    for event in &endings {
        assert_eq!(event["actor"], "stripe");
        assert_eq!(event["detail"]["event_id"], "evt_deleted");
        assert!(event["detail"]["expires_at"].is_string(), "{event}");
    }
    let targets: Vec<&Value> = paid.iter().map(|e| &e["target"]).collect();
    for event in &endings {
        assert!(targets.contains(&&event["target"]), "{event}");
    }
    // Ending them again ends nothing more, and records nothing more.
    let again = subscription_deleted("evt_deleted_again", "cus_audit", now + 60);
    assert_eq!(app.send_event(&again).await, "ended");
    assert_eq!(
        actions_of(&app, account, "subscription.ended").await.len(),
        2
    );
}
