//! Usage export (SPEC §14): the month's CSV, and metered billing through a local Stripe
//! stand-in (`tollgate_testkit::stripe`) that follows the meter events API, faults on
//! demand and reports what it recorded per customer.

mod csv;
mod meter;
mod processes;

use chrono::{DateTime, Utc};
use secrecy::SecretString;
use tollgate::config::Config;
use tollgate::export::{Exporter, MeterSettings};
use tollgate::usage::accounting::UsageEvent;
use tollgate_testkit::stripe::{API_KEY, EVENT_NAME, FakeStripe};

use crate::common::*;

/// Turns the meter export on in `config`, against `stripe`, with short waits.
pub fn use_stripe(config: &mut Config, stripe: &FakeStripe) {
    config.billing.stripe_api_key = Some(SecretString::from(API_KEY));
    config.billing.meter_event_name = Some(EVENT_NAME.to_owned());
    config.billing.stripe_api_base = stripe.api_base();
    config.billing.meter_interval_s = 1;
    config.billing.meter_timeout_ms = 500;
    config.billing.meter_retry_initial_ms = 100;
    config.billing.meter_retry_max_ms = 200;
}

/// An exporter over the app's database, configured as `use_stripe` does.
pub fn exporter(app: &TestApp, stripe: &FakeStripe) -> Exporter {
    let mut config = app.state.config.as_ref().clone();
    use_stripe(&mut config, stripe);
    let settings = MeterSettings::from_config(&config.billing).expect("export on");
    Exporter::new(app.db.pool.clone(), settings)
}

/// Maps `customer` to the account, as a completed checkout does.
pub async fn map_customer(app: &TestApp, account_id: i64, customer: &str) {
    sqlx::query("INSERT INTO stripe_customer (customer, account_id) VALUES ($1, $2)")
        .bind(customer)
        .bind(account_id)
        .execute(&app.db.pool)
        .await
        .unwrap();
}

/// Accounts `n` calls of `cost` units for the customer, at `at`.
pub async fn account_calls(
    app: &TestApp,
    customer: &Customer,
    n: usize,
    cost: i64,
    at: DateTime<Utc>,
) {
    let accountant = app.accountant.clone().expect("metering on");
    let events: Vec<UsageEvent> = (0..n)
        .map(|_| UsageEvent {
            transaction_id: uuid::Uuid::new_v4(),
            account_id: customer.account_id,
            key_id: customer.key_id,
            occurred_at: at,
            method: axum::http::Method::GET,
            route: "/vedic/v1/horoscope/daily".into(),
            upstream_status: 200,
            cost,
            reserved_by: None,
            key_reserved_by: None,
            latency_us: None,
        })
        .collect();
    accountant
        .account(&events, Utc::now())
        .await
        .expect("accounted");
}

/// The units the ledger holds for an account, over every month.
pub async fn ledger_units(app: &TestApp, account_id: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(cost), 0)::bigint FROM subscription_tracking WHERE account_id = $1",
    )
    .bind(account_id)
    .fetch_one(&app.db.pool)
    .await
    .unwrap()
}

/// The account's export windows as the admin API lists them.
pub async fn exports_of(app: &TestApp, account_id: i64) -> Vec<serde_json::Value> {
    let res = app
        .admin_get(&format!("/admin/v1/accounts/{account_id}/exports"))
        .await;
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    body["exports"].as_array().unwrap().clone()
}
