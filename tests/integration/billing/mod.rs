//! Plan catalogue, redemption codes and Stripe payment webhooks (SPEC §11).
//!
//! Stripe events are built as Stripe sends them (an `event` envelope around the
//! object) and signed here with HMAC-SHA256 over `t + "." + body`, as Stripe's docs
//! describe; nothing leaves the machine.

mod catalogue;
mod codes;
mod restore;
mod signatures;
mod stripe;

pub use std::time::Duration;

pub use chrono::{DateTime, Utc};
pub use serde_json::{Value, json};
pub use tollgate::config::{Config, PlanConfig};
pub use tollgate::usage::rules::Enforcement;

use hmac::{Hmac, Mac};
use reqwest::Response;
use secrecy::SecretString;
use sha2::Sha256;

use crate::common::*;

pub const SECRET: &str = "whsec_test_secret_for_billing";
pub const DAILY: &str = "/vedic/v1/horoscope/daily";

/// The catalogue every billing test has, and the webhook secret.
pub fn with_catalogue(c: &mut Config) {
    c.plans = vec![
        PlanConfig {
            name: "pro".into(),
            monthly_allowance: 10_000,
            daily_allowance: None,
            enforcement: Enforcement::Soft,
            price_id: Some("price_pro".into()),
            checkout_url: None,
            features: vec![],
            rate_limit: None,
            ..PlanConfig::default()
        },
        PlanConfig {
            name: "team".into(),
            monthly_allowance: 50_000,
            daily_allowance: Some(5_000),
            enforcement: Enforcement::Hard,
            price_id: Some("price_team".into()),
            checkout_url: None,
            features: vec![],
            rate_limit: None,
            ..PlanConfig::default()
        },
    ];
    c.billing.stripe_webhook_secret = Some(SecretString::from(SECRET));
}

pub async fn billing_app() -> TestApp {
    spawn_app_with(with_catalogue).await
}

/// A Stripe event envelope around `object`.
pub fn event(id: &str, kind: &str, object: Value) -> Value {
    json!({
        "id": id, "object": "event", "api_version": "2024-06-20",
        "created": Utc::now().timestamp(), "livemode": false, "pending_webhooks": 1,
        "request": {"id": null, "idempotency_key": null},
        "type": kind, "data": {"object": object},
    })
}

pub fn checkout(id: &str, account_ref: &str, plan: &str, customer: &str) -> Value {
    event(
        id,
        "checkout.session.completed",
        json!({"id": format!("cs_test_{id}"), "object": "checkout.session",
               "mode": "subscription", "payment_status": "paid", "status": "complete",
               "client_reference_id": account_ref, "customer": customer,
               "metadata": {"plan": plan}, "subscription": "sub_1"}),
    )
}

pub fn invoice_paid(id: &str, customer: &str, price: &str, start: i64, end: i64) -> Value {
    event(
        id,
        "invoice.paid",
        json!({"id": format!("in_{id}"), "object": "invoice", "customer": customer,
               "status": "paid", "subscription": "sub_1",
               "lines": {"object": "list", "has_more": false, "data": [{
                   "id": "il_1", "object": "line_item", "type": "subscription",
                   "price": {"id": price, "object": "price", "recurring": {"interval": "month"}},
                   "period": {"start": start, "end": end}}]}}),
    )
}

pub fn subscription_deleted(id: &str, customer: &str, ended_at: i64) -> Value {
    event(
        id,
        "customer.subscription.deleted",
        json!({"id": "sub_1", "object": "subscription", "customer": customer,
               "status": "canceled", "canceled_at": ended_at, "ended_at": ended_at}),
    )
}

/// Stripe's `v1` signature: hex HMAC-SHA256 of `t + "." + body` under `secret`.
pub fn v1(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

impl TestApp {
    /// Posts `body` to the webhook with `signature` as `Stripe-Signature` (if any).
    pub async fn post_stripe(&self, body: &[u8], signature: Option<String>) -> Response {
        let mut req = self
            .client
            .post(self.url("/billing/v1/stripe"))
            .header("content-type", "application/json; charset=utf-8")
            .body(body.to_vec());
        if let Some(signature) = signature {
            req = req.header("stripe-signature", signature);
        }
        req.send().await.unwrap()
    }

    /// Sends `event` signed now with the test secret; asserts 200 and returns the outcome.
    pub async fn send_event(&self, event: &Value) -> String {
        let body = event.to_string();
        let t = Utc::now().timestamp();
        let header = format!("t={t},v1={}", v1(SECRET, t, body.as_bytes()));
        let res = self.post_stripe(body.as_bytes(), Some(header)).await;
        assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
        let answer: Value = res.json().await.unwrap();
        assert_eq!(answer["id"], event["id"]);
        answer["outcome"].as_str().unwrap().to_owned()
    }

    /// The account's paid subscriptions, oldest first: (plan, starts_at, expires_at,
    /// stripe customer).
    pub async fn paid_subscriptions(&self, account_id: i64) -> Vec<PaidSubscription> {
        sqlx::query_as(
            "SELECT plan, monthly_allowance, starts_at, expires_at, stripe_customer
             FROM subscription WHERE account_id = $1 AND plan <> 'free' ORDER BY id",
        )
        .bind(account_id)
        .fetch_all(&self.db.pool)
        .await
        .unwrap()
    }

    /// The outcome recorded for a Stripe event.
    pub async fn recorded_outcome(&self, event_id: &str) -> Option<String> {
        sqlx::query_scalar("SELECT outcome FROM stripe_event WHERE id = $1")
            .bind(event_id)
            .fetch_optional(&self.db.pool)
            .await
            .unwrap()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PaidSubscription {
    pub plan: String,
    pub monthly_allowance: i64,
    pub starts_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub stripe_customer: Option<String>,
}

pub fn at(unix: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(unix, 0).unwrap()
}
