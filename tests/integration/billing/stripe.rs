//! What Stripe's events do: checkouts and paid invoices activate catalogue plans,
//! cancellations end them, each event id counts once, and events naming what the
//! gateway does not know are recorded and answered 200.

use super::*;
use crate::common::*;

const DAY: i64 = 86_400;

#[tokio::test]
async fn a_checkout_activates_a_month_of_its_plan_and_remembers_the_customer() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let before = Utc::now();
    let outcome = app
        .send_event(&checkout("evt_1", &id.to_string(), "pro", "cus_A"))
        .await;
    assert_eq!(outcome, "activated");

    let subs = app.paid_subscriptions(id).await;
    assert_eq!(subs.len(), 1);
    let sub = &subs[0];
    assert_eq!((sub.plan.as_str(), sub.monthly_allowance), ("pro", 10_000));
    assert!(sub.starts_at >= before && sub.starts_at <= Utc::now());
    let month_later = sub
        .starts_at
        .checked_add_months(chrono::Months::new(1))
        .unwrap();
    assert_eq!(sub.expires_at, Some(month_later));
    assert_eq!(sub.stripe_customer.as_deref(), Some("cus_A"));
    let usage = app.usage_of(id).await;
    assert_eq!(
        (&usage["plan"], &usage["allowance"]),
        (&json!("pro"), &json!(10_000))
    );
    let mapped: i64 =
        sqlx::query_scalar("SELECT account_id FROM stripe_customer WHERE customer = 'cus_A'")
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(mapped, id);
}

/// A checkout session event of `kind` whose `payment_status` is `status`.
fn session_event(id: &str, kind: &str, account: i64, status: &str) -> serde_json::Value {
    event(
        id,
        kind,
        json!({"id": "cs_test_delayed", "object": "checkout.session", "mode": "payment",
               "payment_status": status, "status": "complete",
               "client_reference_id": account.to_string(), "customer": "cus_D",
               "metadata": {"plan": "pro"}}),
    )
}

#[tokio::test]
async fn an_unpaid_checkout_activates_nothing_until_its_delayed_payment_succeeds() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let completed = session_event("evt_c", "checkout.session.completed", id, "unpaid");
    assert_eq!(app.send_event(&completed).await, "pending");
    assert!(app.paid_subscriptions(id).await.is_empty());
    assert_eq!(app.usage_of(id).await["plan"], json!("free"));

    let paid = session_event(
        "evt_s",
        "checkout.session.async_payment_succeeded",
        id,
        "paid",
    );
    assert_eq!(app.send_event(&paid).await, "activated");
    let subs = app.paid_subscriptions(id).await;
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0].stripe_customer.as_deref(), Some("cus_D"));
    assert_eq!(app.usage_of(id).await["plan"], json!("pro"));
}

#[tokio::test]
async fn a_failed_delayed_payment_activates_nothing() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let completed = session_event("evt_c", "checkout.session.completed", id, "unpaid");
    assert_eq!(app.send_event(&completed).await, "pending");
    let failed = session_event(
        "evt_f",
        "checkout.session.async_payment_failed",
        id,
        "unpaid",
    );
    assert_eq!(app.send_event(&failed).await, "payment_failed");
    assert!(app.paid_subscriptions(id).await.is_empty());
    assert_eq!(app.usage_of(id).await["plan"], json!("free"));
    assert_eq!(
        app.recorded_outcome("evt_f").await.as_deref(),
        Some("payment_failed")
    );
}

#[tokio::test]
async fn a_session_that_needs_no_payment_activates_at_once() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let free = session_event(
        "evt_n",
        "checkout.session.completed",
        id,
        "no_payment_required",
    );
    assert_eq!(app.send_event(&free).await, "activated");
    assert_eq!(app.paid_subscriptions(id).await.len(), 1);
}

#[tokio::test]
async fn a_redelivered_event_answers_200_and_changes_nothing() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let event = checkout("evt_again", &id.to_string(), "pro", "cus_A");
    assert_eq!(app.send_event(&event).await, "activated");
    assert_eq!(app.send_event(&event).await, "duplicate");
    // Concurrent redeliveries too: the event's row is claimed in its transaction.
    let (a, b) = tokio::join!(app.send_event(&event), app.send_event(&event));
    assert_eq!((a.as_str(), b.as_str()), ("duplicate", "duplicate"));
    assert_eq!(app.paid_subscriptions(id).await.len(), 1);
    assert_eq!(
        app.recorded_outcome("evt_again").await.as_deref(),
        Some("activated")
    );
}

#[tokio::test]
async fn a_paid_invoice_activates_the_plan_of_its_price_for_its_period() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    app.send_event(&checkout("evt_c", &id.to_string(), "pro", "cus_A"))
        .await;
    let now = Utc::now().timestamp();
    let (start, end) = (now - DAY, now + 29 * DAY);
    let outcome = app
        .send_event(&invoice_paid("evt_i", "cus_A", "price_team", start, end))
        .await;
    assert_eq!(outcome, "activated");

    let subs = app.paid_subscriptions(id).await;
    assert_eq!(subs.len(), 2);
    assert_eq!(
        subs[1],
        PaidSubscription {
            plan: "team".into(),
            monthly_allowance: 50_000,
            starts_at: at(start),
            expires_at: Some(at(end)),
            stripe_customer: Some("cus_A".into()),
        }
    );
    let usage = app.usage_of(id).await;
    assert_eq!(usage["plan"], "pro", "the checkout's month started later");
    assert_eq!(usage["enforcement"], "soft");
}

#[tokio::test]
async fn an_invoice_paid_before_its_checkout_is_applied_when_the_checkout_arrives() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let now = Utc::now().timestamp();
    let (start, end) = (now - 60, now + 30 * DAY);
    let early = invoice_paid("evt_early", "cus_B", "price_team", start, end);
    assert_eq!(app.send_event(&early).await, "pending");
    assert!(app.paid_subscriptions(id).await.is_empty());
    assert_eq!(app.usage_of(id).await["plan"], "free");

    let outcome = app
        .send_event(&checkout("evt_late", &id.to_string(), "pro", "cus_B"))
        .await;
    assert_eq!(outcome, "activated");
    let subs = app.paid_subscriptions(id).await;
    let plans: Vec<&str> = subs.iter().map(|s| s.plan.as_str()).collect();
    assert_eq!(plans, ["pro", "team"]);
    assert_eq!(
        (subs[1].starts_at, subs[1].expires_at),
        (at(start), Some(at(end)))
    );
    assert_eq!(
        app.recorded_outcome("evt_early").await.as_deref(),
        Some("activated")
    );
    // Redelivering either changes nothing more.
    assert_eq!(app.send_event(&early).await, "duplicate");
    let checkout_again = checkout("evt_late", &id.to_string(), "pro", "cus_B");
    assert_eq!(app.send_event(&checkout_again).await, "duplicate");
    assert_eq!(app.paid_subscriptions(id).await.len(), 2);
}

#[tokio::test]
async fn a_cancellation_mid_month_ends_the_subscription_and_usage_falls_back_to_free() {
    let app = spawn_app_with(|c| {
        with_catalogue(c);
        c.usage.free_monthly_calls = 1;
    })
    .await;
    let customer = app.signup().await;
    let id = customer.account_id;
    app.send_event(&checkout("evt_buy", &id.to_string(), "pro", "cus_C"))
        .await;
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    app.wait_for_ledger(id, 2).await;
    assert_eq!(app.usage_of(id).await["exhausted"], false);

    let ended_at = Utc::now().timestamp();
    let outcome = app
        .send_event(&subscription_deleted("evt_cancel", "cus_C", ended_at))
        .await;
    assert_eq!(outcome, "ended");
    let sub = &app.paid_subscriptions(id).await[0];
    assert_eq!(sub.expires_at, Some(sub.starts_at.max(at(ended_at))));
    let usage = app.usage_of(id).await;
    assert_eq!(
        (
            &usage["plan"],
            &usage["allowance"],
            &usage["used"],
            &usage["exhausted"]
        ),
        (&json!("free"), &json!(1), &json!(2), &json!(true))
    );
    // The cancellation asks for the marker as it commits; the throttler's worker writes
    // it, so it shows in this replica's view a moment later.
    let marked = eventually(std::time::Duration::from_secs(5), || async {
        app.state.throttler.is_marked(id, Utc::now())
    })
    .await;
    assert!(marked, "the free grant is used up: marked");
}

#[tokio::test]
async fn events_naming_unknown_accounts_customers_or_plans_are_recorded_and_answered_200() {
    let app = billing_app().await;
    let id = app.signup().await.account_id;
    let now = Utc::now().timestamp();
    let cases = [
        (
            checkout("evt_u1", "999999", "pro", "cus_X"),
            "unknown_account",
        ),
        (
            checkout("evt_u2", "not-a-number", "pro", "cus_X"),
            "unknown_account",
        ),
        (
            checkout("evt_u3", &id.to_string(), "gold", "cus_D"),
            "unknown_plan",
        ),
        (
            invoice_paid("evt_u4", "cus_D", "price_gold", now, now + DAY),
            "unknown_plan",
        ),
        (
            subscription_deleted("evt_u5", "cus_nobody", now),
            "unknown_customer",
        ),
        (
            event("evt_u6", "invoice.paid", json!({"customer": "cus_D"})),
            "malformed",
        ),
        (
            event("evt_u7", "customer.created", json!({"id": "cus_E"})),
            "ignored",
        ),
    ];
    for (event, expected) in &cases {
        assert_eq!(app.send_event(event).await, *expected, "{event}");
        let id = event["id"].as_str().unwrap();
        assert_eq!(app.recorded_outcome(id).await.as_deref(), Some(*expected));
    }
    assert!(app.paid_subscriptions(id).await.is_empty());
    // The checkout with an unknown plan still mapped its customer to the account.
    let later = invoice_paid("evt_u8", "cus_D", "price_pro", now, now + DAY);
    assert_eq!(app.send_event(&later).await, "activated");
    assert_eq!(app.paid_subscriptions(id).await.len(), 1);

    let metrics = tollgate::telemetry::prometheus().render();
    let counted = metrics.lines().any(|l| {
        l.starts_with("tollgate_billing_events_total")
            && l.contains("outcome=\"unknown_plan\"")
            && l.contains("type=\"invoice.paid\"")
    });
    assert!(counted, "{metrics}");
}

#[tokio::test]
async fn a_signed_body_that_is_not_an_event_is_malformed_json() {
    let app = billing_app().await;
    let body = br#"{"object": "event"}"#;
    let t = Utc::now().timestamp();
    let res = app
        .post_stripe(body, Some(format!("t={t},v1={}", v1(SECRET, t, body))))
        .await;
    assert_error(res, 400, "MALFORMED_JSON").await;
}

#[tokio::test]
async fn with_the_database_down_a_good_event_gets_503_so_stripe_retries() {
    let db = std::sync::Arc::new(TestDb::new().await);
    let upstream = std::sync::Arc::new(
        tollgate_testkit::upstream::UpstreamServer::start()
            .await
            .unwrap(),
    );
    let mut config = test_config(&db, &upstream);
    with_catalogue(&mut config);
    let dead = tollgate::db::connect_lazy(
        &secrecy::SecretString::from("postgres://postgres@127.0.0.1:1/none"),
        2,
        Duration::from_millis(500),
    )
    .unwrap();
    let app = spawn_with_pool(db, upstream, config, dead).await;
    let body = checkout("evt_down", "1", "pro", "cus_A").to_string();
    let t = Utc::now().timestamp();
    let header = format!("t={t},v1={}", v1(SECRET, t, body.as_bytes()));
    let res = app.post_stripe(body.as_bytes(), Some(header)).await;
    assert_error(res, 503, "SERVICE_UNAVAILABLE").await;
}
