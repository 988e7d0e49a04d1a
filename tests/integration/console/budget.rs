//! The account page shows the plan's minute window and money (SPEC §20).

use serde_json::json;

use super::*;
use crate::plans::{DAILY, subscribe};

#[tokio::test]
async fn the_account_page_shows_the_minute_window_and_the_money_spent() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    subscribe(
        &app,
        customer.account_id,
        json!({"plan": "stream", "monthly_allowance": 1000, "minute_allowance": 60,
               "unit_price_micros": 500000, "spend_cap_month_micros": 100000000}),
    )
    .await;
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    app.wait_for_ledger(customer.account_id, 3).await;
    let operator = Operator::sign_in(&app).await;
    let page = operator
        .get(&format!("/console/accounts/{}", customer.account_id))
        .await
        .text()
        .await
        .unwrap();
    let dd = |id: &str| {
        let start = page
            .find(&format!("id=\"{id}\">"))
            .unwrap_or_else(|| panic!("{id}: {page}"));
        let rest = &page[start + id.len() + 6..];
        rest[..rest.find("</dd>").unwrap()].to_owned()
    };
    assert_eq!(dd("unit_price"), "$0.50");
    assert_eq!(dd("spent_day"), "$1.50");
    assert_eq!(dd("spent_month"), "$1.50 of $100");
    assert!(dd("minute").ends_with(" of 60"), "{}", dd("minute"));
}
