//! A customer's walk through the portal in headless Chromium (the console's browser
//! harness): sign up, call through the key shown, read the figures and the day's bar,
//! set the key's limit and use it up, make and revoke keys, follow the plans page's
//! upgrade link and redeem a code. Each page is saved as a PNG under
//! `target/portal-screenshots/`.

use fantoccini::Locator;
use serde_json::{Value, json};

use super::http::{DAILY, with_plans};
use crate::common::*;
use crate::console::browser::Browser;

#[tokio::test]
async fn a_customer_signs_up_uses_a_key_limits_it_revokes_it_and_redeems_a_code_in_a_browser() {
    let app = spawn_app_with(with_plans).await;
    let browser = Browser::start_saving_to("portal-screenshots").await;
    let c = &browser.client;

    // Without a session the portal leads to sign-in, which leads to sign-up.
    c.goto(&app.url("/portal/keys")).await.unwrap();
    browser.wait_for_path("/portal/sign-in").await;
    browser.screenshot("sign-in").await;
    browser.follow("a[href='/portal/sign-up']").await;
    browser.wait_for_path("/portal/sign-up").await;
    let email = format!("{}@example.com", uuid::Uuid::new_v4().simple());
    browser.css("#email").await.send_keys(&email).await.unwrap();
    browser
        .css("#password")
        .await
        .send_keys("correct horse battery")
        .await
        .unwrap();
    browser.follow("section.signin button").await;
    let api_key = browser.text("section.created pre.secret code").await;
    assert!(api_key.starts_with("tgk_"), "{api_key}");
    let key_id = browser
        .css("section.created pre.secret")
        .await
        .attr("data-key-id")
        .await
        .unwrap()
        .unwrap();
    browser.screenshot("signed-up").await;

    // Three calls through the key; the overview shows what the usage report says.
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &api_key).await.status(), 200);
    }
    let usage = |key: String| {
        let app = &app;
        async move {
            let res = app
                .client
                .get(app.url("/account/v1/usage"))
                .header("x-api-key", key)
                .send()
                .await
                .unwrap();
            res.json::<Value>().await.unwrap()
        }
    };
    let account_id = usage(api_key.clone()).await["account_id"].as_i64().unwrap();
    app.wait_for_ledger(account_id, 3).await;
    let report = usage(api_key.clone()).await;
    browser.follow("a[href='/portal/']").await;
    browser.wait_for_path("/portal/").await;
    for field in ["allowance", "used", "remaining", "credits"] {
        let shown = browser
            .text(&format!("[data-figure={field}] dd"))
            .await
            .replace(',', "");
        assert_eq!(shown, report[field].to_string(), "{field}");
    }
    assert_eq!(browser.text("[data-figure=plan] dd").await, "free");
    let bars = browser.bars("figure.chart rect.bar").await;
    let today = chrono::Utc::now().date_naive().to_string();
    assert_eq!(bars.last().unwrap(), &(today, 3));
    browser.screenshot("overview").await;

    // A limit of 5 on the key: two calls more, then 429 KEY_QUOTA_EXCEEDED.
    browser.follow("a[href='/portal/keys']").await;
    browser.wait_for_path("/portal/keys").await;
    let row = format!("tr[data-key-id='{key_id}']");
    let field = browser
        .css(&format!("{row} input[name=monthly_limit]"))
        .await;
    field.clear().await.unwrap();
    field.send_keys("5").await.unwrap();
    browser
        .follow(&format!("{row} form[action$='/limit'] button"))
        .await;
    let notice = browser.text("p.flash.done").await;
    assert!(notice.contains("limit is saved"), "{notice}");
    assert_eq!(browser.text(&format!("{row} td[data-limit]")).await, "5");
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &api_key).await.status(), 200);
    }
    assert_error(app.call(DAILY, &api_key).await, 429, "KEY_QUOTA_EXCEEDED").await;
    app.wait_for_ledger(account_id, 5).await;
    c.goto(&app.url("/portal/keys")).await.unwrap();
    browser.wait_for_path("/portal/keys").await;
    assert_eq!(
        browser.text(&format!("{row} .used-up")).await,
        "used up",
        "a used-up key is marked"
    );
    browser.screenshot("key-limited").await;

    // A limit past what the API takes: the refusal names the field as the form labels
    // it, keeps the navigation, and leads back to the form.
    let field = browser
        .css(&format!("{row} input[name=monthly_limit]"))
        .await;
    field.clear().await.unwrap();
    field.send_keys("99999999999999").await.unwrap();
    browser
        .follow(&format!("{row} form[action$='/limit'] button"))
        .await;
    let message = browser.text("section.problem p").await;
    assert!(message.starts_with("Monthly limit must be"), "{message}");
    assert!(
        c.find(Locator::Css("header.top nav a[href='/portal/keys']"))
            .await
            .is_ok()
    );
    browser.screenshot("bad-limit").await;
    browser
        .follow("section.problem a[href='/portal/keys']")
        .await;
    browser.wait_for_path("/portal/keys").await;

    // A new key, shown once, works while the first is used up; then the first is revoked.
    browser.follow("#new-key button").await;
    let second = browser.text("section.created pre.secret code").await;
    assert!(second.starts_with("tgk_") && second != api_key);
    assert_eq!(app.call(DAILY, &second).await.status(), 200);
    browser.screenshot("key-created").await;
    // Revoking asks first: the button that revokes is behind "Revoke…".
    assert!(
        !browser
            .css(&format!("{row} form[action$='/revoke'] button"))
            .await
            .is_displayed()
            .await
            .unwrap(),
        "revoke does not act at once"
    );
    browser
        .css(&format!("{row} details.confirm summary"))
        .await
        .click()
        .await
        .unwrap();
    browser.screenshot("revoke-confirm").await;
    browser
        .follow(&format!("{row} form[action$='/revoke'] button.danger"))
        .await;
    let notice = browser.text("p.flash.done").await;
    assert!(notice.contains("revoked"), "{notice}");
    assert_eq!(app.call(DAILY, &api_key).await.status(), 401);
    let page = c.source().await.unwrap();
    assert!(!page.contains(&second), "a key is shown only once");
    browser.screenshot("key-revoked").await;

    // Plans: the upgrade link carries the account, and a code activates a plan.
    browser.follow("a[href='/portal/plans']").await;
    browser.wait_for_path("/portal/plans").await;
    let href = browser
        .css("tr[data-plan=pro] a.upgrade")
        .await
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    let url = reqwest::Url::parse(&href).unwrap();
    assert_eq!(url.host_str(), Some("buy.stripe.com"));
    assert!(
        url.query_pairs()
            .any(|(k, v)| k == "client_reference_id" && v == account_id.to_string()),
        "{href}"
    );
    assert!(c.find(Locator::Css("tr[data-plan=team] a")).await.is_err());
    assert!(browser.text("#current-plan").await.contains("free"));
    browser.screenshot("plans").await;
    let res = app
        .admin_post(
            "/admin/v1/codes",
            &json!({"plan": "pro", "months": 1, "count": 1, "expires_at": null}),
        )
        .await;
    let code = res.json::<Value>().await.unwrap()["codes"][0]
        .as_str()
        .unwrap()
        .to_owned();
    browser.css("#code").await.send_keys(&code).await.unwrap();
    browser.follow("#redeem button").await;
    browser.wait_for_path("/portal/").await;
    assert_eq!(browser.text("[data-figure=plan] dd").await, "pro");
    assert_eq!(
        browser.text("[data-figure=daily_allowance] dd").await,
        "1,000"
    );
    browser.screenshot("redeemed").await;
    browser.follow("a[href='/portal/plans']").await;
    browser.wait_for_path("/portal/plans").await;
    assert!(browser.text("#current-plan").await.contains("pro"));
    assert_eq!(
        browser.text("tr[data-plan=pro] .badge").await,
        "your plan",
        "the plan the customer is on is marked"
    );
    assert!(
        c.find(Locator::Css("tr[data-plan=pro] a.upgrade"))
            .await
            .is_err(),
        "no upgrade to the plan one is on"
    );
    browser.screenshot("plans-current").await;

    // Signing out ends the session.
    browser.follow("form.signout button").await;
    browser.wait_for_path("/portal/sign-in").await;
    c.goto(&app.url("/portal/")).await.unwrap();
    browser.wait_for_path("/portal/sign-in").await;
    browser.close().await;
}
