//! Reload and the budgets of SPEC §20: a catalogue plan's minute window and price apply to
//! the activations after it, a minute already spent stays spent, and streamed usage can
//! be turned on without a restart.

use serde_json::json;

use super::*;
use crate::budgets::{early_in_a_minute, item};
use crate::plans::{DAILY, header, subscribe, used};

const PLAN: &str = r#"
[[plans]]
name = "stream"
monthly_allowance = 1000
minute_allowance = 3
unit_price_micros = 100
"#;

#[tokio::test]
async fn a_reload_changes_new_activations_and_leaves_windows_and_spend_as_they_were() {
    let gateway = spawn_from_files(PLAN).await;
    let app = &gateway.app;
    let first = app.signup().await;
    subscribe(app, first.account_id, json!({"plan": "stream"})).await;
    early_in_a_minute(20).await;
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &first.api_key).await.status(), 200);
    }
    used(app, first.account_id, 2).await;

    gateway.rewrite(
        &PLAN
            .replace("minute_allowance = 3", "minute_allowance = 10")
            .replace("unit_price_micros = 100", "unit_price_micros = 500"),
    );
    assert_eq!(gateway.reload().await, 2);

    // The first customer's subscription keeps its figures, and its minute its two units.
    let res = app.call(DAILY, &first.api_key).await;
    assert_eq!(res.status(), 200);
    assert_eq!(item(&header(&res, "ratelimit"), "minute").unwrap().0, 0);
    assert_eq!(
        item(&header(&res, "ratelimit-policy"), "minute"),
        Some((3, 60))
    );
    assert_eq!(app.call(DAILY, &first.api_key).await.status(), 429);
    let usage = used(app, first.account_id, 3).await;
    assert_eq!(usage["spent_micros"]["month"], 300);

    // An activation after the reload takes the new figures.
    let second = app.signup().await;
    subscribe(app, second.account_id, json!({"plan": "stream"})).await;
    let res = app.call(DAILY, &second.api_key).await;
    assert_eq!(
        item(&header(&res, "ratelimit-policy"), "minute"),
        Some((10, 60))
    );
    assert_eq!(
        used(app, second.account_id, 1).await["spent_micros"]["month"],
        500
    );
}

#[tokio::test]
async fn streamed_usage_is_turned_on_by_a_reload() {
    let gateway = spawn_from_files("").await;
    let app = &gateway.app;
    let customer = app.signup().await;
    let stream = "/vedic/v1/stream/4,8?pace_ms=5";
    let body = app
        .call(stream, &customer.api_key)
        .await
        .text()
        .await
        .unwrap();
    assert!(body.contains("{\"units\": 8}"));
    used(app, customer.account_id, 1).await;

    gateway.rewrite("[pricing]\nstream_usage = true\n");
    gateway.reload().await;
    app.call(stream, &customer.api_key)
        .await
        .text()
        .await
        .unwrap();
    used(app, customer.account_id, 1 + 8).await;
}
