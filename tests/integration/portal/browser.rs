//! A customer's walk through the portal in headless Chromium (the console's browser
//! harness): sign up, call through the key shown, read the figures and the day's bar,
//! set the key's limit and use it up, make and revoke keys, follow the plans page's
//! upgrade link and redeem a code; and read the month's calls by route and key and the
//! latency chart. Each page is saved as a PNG under `target/portal-screenshots/`.

use fantoccini::Locator;
use serde_json::{Value, json};

use super::http::{DAILY, with_plans};
use crate::common::*;
use crate::console::browser::{Browser, latency_history};

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

#[tokio::test]
async fn a_customer_reads_the_months_calls_by_route_and_key_and_the_latency_chart_in_a_browser() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let session = app.login(&customer).await;
    let created: Value = app
        .client
        .post(app.url("/account/v1/keys"))
        .bearer_auth(&session)
        .json(&json!({"name": "nightly batch"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let batch = created["api_key"].as_str().unwrap();
    let batch_id = created["key_id"].as_i64().unwrap();

    let browser = Browser::start_saving_to("portal-screenshots").await;
    let c = &browser.client;
    c.goto(&app.url("/portal/sign-in")).await.unwrap();
    browser
        .css("#email")
        .await
        .send_keys(&customer.email)
        .await
        .unwrap();
    browser
        .css("#password")
        .await
        .send_keys(&customer.password)
        .await
        .unwrap();
    browser.follow("section.signin button").await;
    browser.wait_for_path("/portal/").await;
    // No calls yet: one line says so.
    let empty = browser.text("#calls p.empty").await;
    assert!(empty.starts_with("No calls yet this month"), "{empty}");
    assert!(c.find(Locator::Css("#latency")).await.is_err());
    browser.scroll_to("#calls").await;
    browser.screenshot("overview-no-calls").await;

    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &customer.api_key).await.status(), 200);
    }
    for path in [
        "/vedic/v1/slow/40",
        "/western/v1/natal",
        "/vedic/v1/status/503",
    ] {
        app.call(path, batch).await;
    }
    app.wait_for_ledger(customer.account_id, 6).await;
    let history = latency_history(
        &app,
        customer.key_id,
        customer.account_id,
        "/western/v1/chart",
    )
    .await;
    c.refresh().await.unwrap();
    browser.wait_for_path("/portal/").await;

    let route = |route: &str| format!("#calls-by-route tr[data-route='{route}'] td[data-calls]");
    assert_eq!(browser.text(&route("/vedic/v1/horoscope")).await, "3");
    assert_eq!(browser.text(&route("/vedic/v1/status")).await, "1");
    assert_eq!(
        browser
            .text("#calls-by-route tr[data-route='/vedic/v1/status'] td[data-errors]")
            .await,
        "1"
    );
    if history > 0 {
        let shown = browser
            .text(&route("/western/v1/chart"))
            .await
            .replace(',', "");
        assert_eq!(shown, history.to_string());
    }
    let key = |id: i64| format!("#calls-by-key tr[data-key='{id}']");
    assert_eq!(
        browser
            .text(&format!("{} td[data-calls]", key(batch_id)))
            .await,
        "3"
    );
    assert_eq!(
        browser.text(&format!("{} .key-name", key(batch_id))).await,
        "nightly batch"
    );
    assert_eq!(
        browser
            .text(&format!("{} .key-name", key(customer.key_id)))
            .await,
        "default"
    );
    let today = chrono::Utc::now().date_naive().to_string();
    for series in ["p50", "p95", "p99"] {
        browser
            .css(&format!(
                "#latency g[data-series={series}] circle[data-day='{today}']"
            ))
            .await;
    }
    browser.scroll_to("#calls-by-route").await;
    browser.screenshot("overview-analytics").await;
    browser
        .screenshot_of("#latency figure", "overview-latency")
        .await;
    browser.close().await;
}

/// The keys page's new forms in a browser: a key made with a name, an expiry and one
/// API's scope is listed with them and held to them; rolling it shows the new key once
/// and when the old one stops.
#[tokio::test]
async fn a_customer_makes_a_named_scoped_expiring_key_and_rolls_it_in_a_browser() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let browser = Browser::start_saving_to("portal-screenshots").await;
    let c = &browser.client;
    c.goto(&app.url("/portal/sign-in")).await.unwrap();
    browser
        .css("#email")
        .await
        .send_keys(&customer.email)
        .await
        .unwrap();
    browser
        .css("#password")
        .await
        .send_keys(&customer.password)
        .await
        .unwrap();
    browser.follow("section.signin button").await;
    browser.wait_for_path("/portal/").await;
    browser.follow("a[href='/portal/keys']").await;
    browser.wait_for_path("/portal/keys").await;

    let expires = (chrono::Utc::now() + chrono::Duration::days(30))
        .format("%Y-%m-%d %H:%M")
        .to_string();
    browser
        .css("#new-name")
        .await
        .send_keys("ci runner")
        .await
        .unwrap();
    browser
        .css("#new-expires")
        .await
        .send_keys(&expires)
        .await
        .unwrap();
    browser
        .css("#new-scopes input[name=scope_vedic]")
        .await
        .click()
        .await
        .unwrap();
    browser.screenshot("key-form-filled").await;
    browser.follow("form#new-key button").await;
    let api_key = browser.text("section.created pre.secret code").await;
    let key_id = browser
        .css("section.created pre.secret")
        .await
        .attr("data-key-id")
        .await
        .unwrap()
        .unwrap();
    let row = format!("tr[data-key-id='{key_id}']");
    assert_eq!(browser.text(&format!("{row} td.name")).await, "ci runner");
    assert_eq!(
        browser.text(&format!("{row} td.scopes")).await,
        "/vedic/v1/"
    );
    assert_eq!(browser.text(&format!("{row} td.expires")).await, expires);
    browser.screenshot("key-created-with-settings").await;
    assert_eq!(app.call(DAILY, &api_key).await.status(), 200);
    assert_error(
        app.call("/western/v1/chart", &api_key).await,
        403,
        "KEY_SCOPE_DENIED",
    )
    .await;

    // Roll it with no grace: the new key is shown once, the old one refused at once.
    browser
        .css(&format!("{row} details.roll summary"))
        .await
        .click()
        .await
        .unwrap();
    let grace = browser.css(&format!("{row} input[name=grace_hours]")).await;
    grace.clear().await.unwrap();
    grace.send_keys("0").await.unwrap();
    browser.screenshot("key-roll-confirm").await;
    browser
        .follow(&format!("{row} form[action$='/roll'] button"))
        .await;
    let new_key = browser.text("section.rolled pre.secret code").await;
    assert!(new_key.starts_with("tgk_") && new_key != api_key);
    let end = browser.text("#old-key-end").await;
    assert!(end.contains("is accepted until"), "{end}");
    browser.screenshot("key-rolled").await;
    assert_error(app.call(DAILY, &api_key).await, 401, "KEY_EXPIRED").await;
    assert_eq!(app.call(DAILY, &new_key).await.status(), 200);
    browser.close().await;
}
