//! Budgets for streamed answers (SPEC §20): usage spent as an event stream reports it,
//! the cut-off mid-stream, a cost in the trailer, minute windows, spend caps in money,
//! composed `Retry-After`, and the same across two replicas.

mod caps;
mod minute;
mod stream;

pub use std::sync::Arc;
pub use std::time::Duration;

pub use chrono::Utc;
pub use reqwest::StatusCode;
pub use serde_json::{Value, json};
pub use tollgate::month::{Day, Month};

pub use crate::common::*;
pub use crate::plans::{DAILY, header, subscribe, used};

/// A gateway that reads streamed usage and the upstream's cost header (head or trailer).
pub async fn streaming_app() -> TestApp {
    spawn_app_with(|c| {
        c.pricing.stream_usage = true;
        c.pricing.cost_header = Some(tollgate_testkit::upstream::COST_HEADER.into());
    })
    .await
}

/// A new customer whose account is on the plan `subscription` describes (an admin
/// subscription body).
pub async fn customer_on(app: &TestApp, subscription: Value) -> Customer {
    let customer = app.signup().await;
    subscribe(app, customer.account_id, subscription).await;
    customer
}

/// `"<name>";r=<r>;t=<t>` of a `RateLimit` value → (r, t), if the item is there.
pub fn item(value: &str, name: &str) -> Option<(i64, i64)> {
    let item = value
        .split(", ")
        .find(|i| i.starts_with(&format!("\"{name}\"")))?;
    let mut r = None;
    let mut t = None;
    for param in item.split(';').skip(1) {
        let (k, v) = param.split_once('=')?;
        match k {
            "r" | "q" => r = v.parse().ok(),
            "t" | "w" => t = v.parse().ok(),
            _ => {}
        }
    }
    Some((r?, t?))
}

/// Waits until at least `margin` seconds are left in the current epoch minute, so a
/// test's calls fall in one window.
pub async fn early_in_a_minute(margin: i64) {
    let left = 60 - Utc::now().timestamp().rem_euclid(60);
    if left < margin {
        tokio::time::sleep(Duration::from_millis(left as u64 * 1000 + 50)).await;
    }
}

/// The `spent_micros` of the account's usage object once its month's `used` is `units`.
pub async fn spent(app: &TestApp, account_id: i64, units: i64) -> (i64, i64) {
    let usage = used(app, account_id, units).await;
    (
        usage["spent_micros"]["day"].as_i64().unwrap(),
        usage["spent_micros"]["month"].as_i64().unwrap(),
    )
}
