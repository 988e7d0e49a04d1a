//! Plans customers see and operators shape (SPEC §3.1.6, §3.3, §3.4, §6): quota
//! headers, priced calls, daily windows, hard limits across replicas, top-ups, and the
//! operators' reads.

mod daily;
mod hard;
mod headers;
mod operators;
mod prices;

pub use std::sync::Arc;
pub use std::time::Duration;

pub use chrono::{DateTime, Utc};
pub use reqwest::StatusCode;
pub use serde_json::{Value, json};
pub use tollgate::config::{Config, RoutePrice};
pub use tollgate::month::{Day, Month};

use crate::common::*;

pub const DAILY: &str = "/vedic/v1/horoscope/daily";

pub async fn subscribe(app: &TestApp, account_id: i64, body: Value) {
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{account_id}/subscriptions"),
            &body,
        )
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
}

/// The usage object once `used` has reached `expected` (accounting is asynchronous).
pub async fn used(app: &TestApp, account_id: i64, expected: i64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let usage = app.usage_of(account_id).await;
        if usage["used"] == expected {
            return usage;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "used never reached {expected}: {usage}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn header(res: &reqwest::Response, name: &str) -> String {
    res.headers()
        .get(name)
        .unwrap_or_else(|| panic!("{name} missing"))
        .to_str()
        .unwrap()
        .to_owned()
}

pub fn month_seconds() -> i64 {
    let month = Month::containing(Utc::now());
    (month.end() - month.start()).num_seconds()
}

/// `"monthly";r=<r>;t=<t>` → (r, t).
pub fn monthly_item(value: &str) -> (i64, i64) {
    let item = value.split(", ").next().unwrap();
    let mut r = None;
    let mut t = None;
    for param in item.split(';').skip(1) {
        let (k, v) = param.split_once('=').unwrap();
        match k {
            "r" => r = v.parse().ok(),
            "t" => t = v.parse().ok(),
            _ => {}
        }
    }
    (r.unwrap(), t.unwrap())
}
