//! The overview shows a plan's minute window and its money (SPEC §20) when it has them.

use serde_json::json;

use super::*;
use crate::plans::{DAILY, subscribe};

#[tokio::test]
async fn the_overview_shows_the_minute_window_and_the_money_spent() {
    let app = spawn_app().await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    let account_id = visitor.api("/account/v1/usage").await["account_id"]
        .as_i64()
        .unwrap();
    // The free plan has neither.
    let page = visitor.page("/portal/").await;
    assert!(!page.contains("data-figure=\"minute_allowance\""));
    assert!(!page.contains("data-figure=\"unit_price\""));

    subscribe(
        &app,
        account_id,
        json!({"plan": "stream", "monthly_allowance": 1000, "minute_allowance": 600,
               "unit_price_micros": 2500, "spend_cap_day_micros": 1000000}),
    )
    .await;
    for _ in 0..4 {
        assert_eq!(app.call(DAILY, &visitor.api_key).await.status(), 200);
    }
    app.wait_for_ledger(account_id, 4).await;
    let page = visitor.page("/portal/").await;
    assert_eq!(figure(&page, "minute_allowance"), "600");
    assert_eq!(figure(&page, "unit_price"), "$0.0025");
    assert_eq!(figure(&page, "spent_day"), "$0.01 of $1");
    assert_eq!(figure(&page, "spent_month"), "$0.01");
    let used: i64 = figure(&page, "minute_used").parse().unwrap();
    // Unless the minute turned between the calls and the page.
    assert!(used == 4 || used == 0, "{used}");
}
