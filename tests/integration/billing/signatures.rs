//! The webhook's signature check, end to end: only events Stripe signed with this
//! endpoint's secret, within five minutes of now, change anything.

use super::*;
use crate::common::*;

/// A checkout that would activate `pro` for `account_id` if it were accepted.
fn body(account_id: i64) -> Vec<u8> {
    checkout("evt_sig", &account_id.to_string(), "pro", "cus_sig")
        .to_string()
        .into_bytes()
}

async fn assert_refused(app: &TestApp, account_id: i64, res: reqwest::Response) {
    assert_error(res, 400, "BAD_SIGNATURE").await;
    assert!(app.paid_subscriptions(account_id).await.is_empty());
    assert_eq!(app.recorded_outcome("evt_sig").await, None);
}

#[tokio::test]
async fn a_correctly_signed_event_is_accepted() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let body = body(id);
    let t = Utc::now().timestamp();
    let res = app
        .post_stripe(&body, Some(format!("t={t},v1={}", v1(SECRET, t, &body))))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.paid_subscriptions(id).await.len(), 1);
}

#[tokio::test]
async fn timestamps_more_than_five_minutes_old_or_ahead_are_refused() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let body = body(id);
    // The exact edge (300 s in, 301 s out) is unit-tested with a fixed clock; here a
    // margin keeps a slow machine's request time from carrying a timestamp back inside.
    for offset in [-330, 330, -86_400] {
        let t = Utc::now().timestamp() + offset;
        let header = format!("t={t},v1={}", v1(SECRET, t, &body));
        assert_refused(&app, id, app.post_stripe(&body, Some(header)).await).await;
    }
}

#[tokio::test]
async fn a_signature_made_with_another_secret_or_over_another_body_is_refused() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let body = body(id);
    let t = Utc::now().timestamp();
    let wrong_secret = format!("t={t},v1={}", v1("whsec_someone_else", t, &body));
    assert_refused(&app, id, app.post_stripe(&body, Some(wrong_secret)).await).await;
    let other_body = format!("t={t},v1={}", v1(SECRET, t, b"{}"));
    assert_refused(&app, id, app.post_stripe(&body, Some(other_body)).await).await;
    // The same event re-serialized (whitespace added) is not the signed body.
    let signed = format!("t={t},v1={}", v1(SECRET, t, &body));
    let mut spaced = body.clone();
    spaced.push(b'\n');
    assert_refused(&app, id, app.post_stripe(&spaced, Some(signed)).await).await;
}

#[tokio::test]
async fn during_secret_rotation_any_of_several_v1_signatures_may_match() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let body = body(id);
    let t = Utc::now().timestamp();
    let header = format!(
        "t={t},v1={},v1={},v0={}",
        v1("whsec_old_secret", t, &body),
        v1(SECRET, t, &body),
        v1("whsec_test_mode", t, &body)
    );
    let res = app.post_stripe(&body, Some(header)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.paid_subscriptions(id).await.len(), 1);
}

#[tokio::test]
async fn a_missing_or_malformed_signature_header_is_refused() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let body = body(id);
    let t = Utc::now().timestamp();
    let sig = v1(SECRET, t, &body);
    assert_refused(&app, id, app.post_stripe(&body, None).await).await;
    for bad in [
        String::new(),
        sig.clone(),
        format!("v1={sig}"),
        format!("t={t}"),
        format!("t=now,v1={sig}"),
        format!("t={t};v1={sig}"),
        format!("t={t},v0={sig}"),
    ] {
        assert_refused(&app, id, app.post_stripe(&body, Some(bad)).await).await;
    }
}

#[tokio::test]
async fn without_a_signing_secret_the_webhook_route_does_not_exist() {
    let app = spawn_app().await;
    let body = b"{}";
    let t = Utc::now().timestamp();
    let res = app
        .post_stripe(body, Some(format!("t={t},v1={}", v1(SECRET, t, body))))
        .await;
    assert_error(res, 404, "NOT_FOUND").await;
}

#[tokio::test]
async fn a_body_over_16_kib_is_413_and_a_body_that_is_not_json_is_415() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    // A signed event padded past 16 KiB.
    let mut event = checkout("evt_big", &id.to_string(), "pro", "cus_A");
    event["data"]["object"]["metadata"]["padding"] = json!("x".repeat(20 * 1024));
    let body = event.to_string();
    let t = Utc::now().timestamp();
    let signature = format!("t={t},v1={}", v1(SECRET, t, body.as_bytes()));
    let res = app.post_stripe(body.as_bytes(), Some(signature)).await;
    assert_error(res, 413, "PAYLOAD_TOO_LARGE").await;

    let body = checkout("evt_text", &id.to_string(), "pro", "cus_A").to_string();
    let signature = format!("t={t},v1={}", v1(SECRET, t, body.as_bytes()));
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut req = app.client.post(app.url("/billing/v1/stripe"));
        if let Some(content_type) = content_type {
            req = req.header("content-type", content_type);
        }
        let res = req
            .header("stripe-signature", &signature)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_error(res, 415, "UNSUPPORTED_MEDIA_TYPE").await;
    }
    assert!(
        app.paid_subscriptions(id).await.is_empty(),
        "nothing applied"
    );
}
