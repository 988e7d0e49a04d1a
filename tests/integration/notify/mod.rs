//! Threshold webhooks (SPEC §7): what a receiver sees when accounts cross
//! `notify.thresholds`, through the real gateway on port 0 (or the library's accountant
//! for replicas and redeliveries), against a local receiver that can fail, hang or go
//! down. Retries are made fast here (100 ms doubling to 400 ms, 500 ms timeout); the
//! 24-hour window is reached by recording events as if a day old.

mod delivery;
mod fleet;
mod processes;
mod receiver;

use std::collections::HashMap;
use std::time::Duration;

use hmac::{Hmac, Mac};
use secrecy::SecretString;
use serde_json::{Value, json};
use sha2::Sha256;
use sqlx::PgPool;
use tollgate::config::Config;

use crate::common::{Customer, TestApp, eventually};
pub use receiver::{Answer, Receiver};

pub const SECRET: &str = "whsec_tollgate_test";
pub const DAILY: &str = "/vedic/v1/horoscope/daily";

/// Turns webhooks on towards `receiver`, with a fast retry schedule.
pub fn notify_to(config: &mut Config, receiver: &Receiver) {
    config.notify.webhook_url = Some(receiver.url());
    config.notify.webhook_secret = Some(SecretString::from(SECRET));
    config.notify.timeout_ms = 500;
    config.notify.retry_initial_ms = 100;
    config.notify.retry_max_ms = 400;
    config.notify.poll_interval_ms = 50;
    config.notify.lease_ttl_ms = 2_000;
}

/// The same, as the environment of a `tollgate` process.
pub fn notify_env(receiver: &Receiver) -> Vec<(String, String)> {
    [
        ("TOLLGATE__NOTIFY__WEBHOOK_URL", receiver.url()),
        ("TOLLGATE__NOTIFY__WEBHOOK_SECRET", SECRET.into()),
        ("TOLLGATE__NOTIFY__TIMEOUT_MS", "500".into()),
        ("TOLLGATE__NOTIFY__RETRY_INITIAL_MS", "100".into()),
        ("TOLLGATE__NOTIFY__RETRY_MAX_MS", "400".into()),
        ("TOLLGATE__NOTIFY__POLL_INTERVAL_MS", "50".into()),
        ("TOLLGATE__NOTIFY__LEASE_TTL_MS", "2000".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Whether `header` is a good `Tollgate-Signature` of `body` under `secret`, checked
/// here from the documented recipe, not with the gateway's code.
pub fn signature_verifies(header: &str, body: &[u8], secret: &str) -> bool {
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = Some(value.to_owned()),
            Some(("v1", value)) => v1 = Some(value.to_owned()),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    hex::decode(v1).is_ok_and(|sig| mac.verify_slice(&sig).is_ok())
}

/// The unix time a signature header carries.
pub fn signed_at(header: &str) -> i64 {
    header
        .split(',')
        .find_map(|p| p.strip_prefix("t="))
        .and_then(|t| t.parse().ok())
        .expect("t=<unix seconds>")
}

impl TestApp {
    /// Gives `customer` a soft plan of `allowance` units a month, starting now.
    pub async fn plan(&self, customer: &Customer, allowance: i64) {
        let res = self
            .admin_post(
                &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
                &json!({"plan": "tiny", "monthly_allowance": allowance}),
            )
            .await;
        assert_eq!(res.status(), 201, "subscription");
    }

    /// Makes `n` calls and waits until they are all accounted.
    pub async fn calls(&self, customer: &Customer, path: &str, n: i64) {
        let before = self.ledger_rows(customer.account_id).await;
        for _ in 0..n {
            let res = self.call(path, &customer.api_key).await;
            assert_eq!(res.status(), 200, "call");
        }
        self.wait_for_ledger(customer.account_id, before + n).await;
    }
}

/// Outbox rows `(account_id, threshold, delivered, failed)`, in delivery order.
pub async fn outbox(pool: &PgPool) -> Vec<(i64, i16, bool, bool)> {
    sqlx::query_as(
        "SELECT account_id, threshold, delivered_at IS NOT NULL, failed_at IS NOT NULL
           FROM notification_outbox ORDER BY account_id, occurred_at, threshold",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Waits until the receiver has taken `n` events (2xx), failing with what it saw.
pub async fn wait_for_delivered(receiver: &Receiver, n: usize, within: Duration) {
    let got = eventually(within, || async { receiver.delivered().len() >= n }).await;
    assert!(
        got,
        "{} of {n} events delivered; requests: {:?}",
        receiver.delivered().len(),
        summary(receiver)
    );
}

/// `(account_id, threshold, answered)` of every request, for failure messages.
pub fn summary(receiver: &Receiver) -> Vec<(i64, i64, Option<u16>)> {
    receiver
        .requests()
        .iter()
        .map(|r| (r.account_id(), r.threshold(), r.answered))
        .collect()
}

/// How many 2xx answers each event id got.
pub fn deliveries_per_id(receiver: &Receiver) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for r in receiver.delivered() {
        *counts.entry(r.id()).or_default() += 1;
    }
    counts
}

/// `(account_id, threshold)` of the delivered events, in arrival order.
pub fn delivered_pairs(receiver: &Receiver) -> Vec<(i64, i64)> {
    receiver
        .delivered()
        .iter()
        .map(|r| (r.account_id(), r.threshold()))
        .collect()
}

/// The body's field names, sorted.
pub fn fields(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body
        .as_object()
        .expect("an object")
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}
