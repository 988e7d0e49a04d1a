//! `POST /admin/v1/reload`: what a reload puts in force for the next call and activation,
//! what it leaves alone (counters, active subscriptions), and what it refuses.

use serde_json::{Value, json};

use super::*;
use crate::plans::used;

const BASIC: &str = r#"
[[plans]]
name = "basic"
monthly_allowance = 100
"#;

async fn subscribe(app: &TestApp, account_id: i64, body: Value) -> Response {
    app.admin_post(
        &format!("/admin/v1/accounts/{account_id}/subscriptions"),
        &body,
    )
    .await
}

#[tokio::test]
async fn a_plan_added_to_the_file_is_offered_and_activated_with_its_figures_after_a_reload() {
    let gw = spawn_from_files(BASIC).await;
    let customer = gw.app.signup().await;
    assert_eq!(gw.plan_names().await, ["basic"]);
    // Not in the catalogue yet: its figures must be given.
    let res = subscribe(&gw.app, customer.account_id, json!({"plan": "gold"})).await;
    assert_error(res, 422, "VALIDATION_FAILED").await;

    gw.rewrite(&format!(
        r#"{BASIC}
[[plans]]
name = "gold"
monthly_allowance = 5000
daily_allowance = 400
enforcement = "hard"
features = ["synastry"]
rate_limit = {{ per_second = 5, burst = 10 }}
"#
    ));
    assert_eq!(gw.reload().await, 2, "generation 1 is the one started with");

    assert_eq!(gw.plan_names().await, ["basic", "gold"]);
    let res = subscribe(&gw.app, customer.account_id, json!({"plan": "gold"})).await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    assert_eq!(created["monthly_allowance"], 5000);
    assert_eq!(created["daily_allowance"], 400);
    assert_eq!(created["enforcement"], "hard");
    assert_eq!(created["features"], json!(["synastry"]));
    assert_eq!(created["rate_limit"], json!({"per_second": 5, "burst": 10}));
    let usage = gw.app.usage_of(customer.account_id).await;
    assert_eq!(
        (usage["plan"].as_str(), usage["allowance"].as_i64()),
        (Some("gold"), Some(5000))
    );

    // Redemption codes and the document follow the catalogue in force too.
    let res = gw
        .app
        .admin_post(
            "/admin/v1/codes",
            &json!({"plan": "gold", "months": 1, "count": 1}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let doc: Value = gw
        .app
        .client
        .get(gw.app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        doc["components"]["schemas"]["CodesRequest"]["properties"]["plan"]["enum"],
        json!(["basic", "gold"])
    );
    assert_eq!(gw.reload().await, 3);
}

#[tokio::test]
async fn a_changed_route_price_accounts_the_next_call_and_leaves_what_was_used() {
    let priced = |cost: i64| {
        format!("[pricing]\nroutes = [{{ prefix = \"/vedic/v1/kundli\", cost = {cost} }}]\n")
    };
    let gw = spawn_from_files(&priced(5)).await;
    let customer = gw.app.signup().await;
    assert_eq!(
        gw.app
            .call("/vedic/v1/kundli/full", &customer.api_key)
            .await
            .status(),
        200
    );
    let before = used(&gw.app, customer.account_id, 5).await;

    gw.rewrite(&priced(7));
    assert_eq!(gw.reload().await, 2);
    let after = gw.app.usage_of(customer.account_id).await;
    assert_eq!(after["used"], before["used"], "a reload counts nothing");
    assert_eq!(after["remaining"], before["remaining"]);

    assert_eq!(
        gw.app
            .call("/vedic/v1/kundli/full", &customer.api_key)
            .await
            .status(),
        200
    );
    used(&gw.app, customer.account_id, 12).await;
    let costs: Vec<i64> = sqlx::query_scalar(
        "SELECT cost FROM subscription_tracking WHERE account_id = $1 ORDER BY occurred_at",
    )
    .bind(customer.account_id)
    .fetch_all(&gw.app.db.pool)
    .await
    .unwrap();
    assert_eq!(costs, vec![5, 7]);
}

#[tokio::test]
async fn an_active_subscription_keeps_the_figures_it_was_activated_with() {
    let gw = spawn_from_files(BASIC).await;
    let customer = gw.app.signup().await;
    let res = subscribe(&gw.app, customer.account_id, json!({"plan": "basic"})).await;
    assert_eq!(res.status(), 201);

    gw.rewrite("[[plans]]\nname = \"basic\"\nmonthly_allowance = 200\n");
    gw.reload().await;
    let usage = gw.app.usage_of(customer.account_id).await;
    assert_eq!(usage["allowance"], 100, "as activated");

    // The next activation takes the catalogue's new figure.
    let other = gw.app.signup().await;
    let res = subscribe(&gw.app, other.account_id, json!({"plan": "basic"})).await;
    let created: Value = res.json().await.unwrap();
    assert_eq!(created["monthly_allowance"], 200);
}

#[tokio::test]
async fn the_free_grant_and_the_routes_features_follow_a_reload_on_the_next_call() {
    let entitled = |free: &str| {
        format!(
            "[entitlements]\nroutes = [{{ prefix = \"/western/v1/synastry/\", feature = \"synastry\" }}]\n\
             [usage]\nfree_features = [{free}]\n"
        )
    };
    let gw = spawn_from_files(&entitled("")).await;
    let customer = gw.app.signup().await;
    let synastry = "/western/v1/synastry/report";
    assert_error(
        gw.app.call(synastry, &customer.api_key).await,
        403,
        "FEATURE_NOT_IN_PLAN",
    )
    .await;

    gw.rewrite(&entitled("\"synastry\""));
    gw.reload().await;
    assert_eq!(gw.app.call(synastry, &customer.api_key).await.status(), 200);
    let token = gw.app.login(&customer).await;
    let entitlements: Value = gw
        .app
        .client
        .get(gw.app.url("/account/v1/entitlements"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(entitlements["features"], json!(["synastry"]));

    // Without the route, the call needs no feature at all.
    gw.rewrite("");
    gw.reload().await;
    assert_eq!(gw.app.call(synastry, &customer.api_key).await.status(), 200);
}

#[tokio::test]
async fn a_configuration_that_does_not_load_or_validate_is_refused_and_changes_nothing() {
    let layer =
        format!("{BASIC}[pricing]\nroutes = [{{ prefix = \"/vedic/v1/kundli\", cost = 5 }}]\n");
    let gw = spawn_from_files(&layer).await;
    let customer = gw.app.signup().await;

    for (bad, named) in [
        // An unknown key, named with the file it is in.
        (
            format!("{layer}[[plans]]\nname = \"gold\"\nmonthly_allowance = 1\ncolour = \"red\"\n"),
            "unknown key",
        ),
        // A bad value, in the product's words.
        (
            format!("{layer}[[plans]]\nname = \"gold\"\nmonthly_allowance = -1\n"),
            "allowances must not be negative",
        ),
        (
            format!(
                "{BASIC}[pricing]\nroutes = [{{ prefix = \"/vedic/v1/kundli\", cost = 2000000 }}]\n"
            ),
            "must be 0 to 1000000",
        ),
        // Not TOML at all.
        ("[[plans]\nname = ".to_owned(), "TOML parse error"),
    ] {
        gw.rewrite(&bad);
        let res = gw.reload_with(ADMIN_TOKEN).await;
        let status = res.status();
        let body: Value = res.json().await.unwrap();
        assert_eq!(
            (status.as_u16(), body["code"].as_str()),
            (422, Some("VALIDATION_FAILED")),
            "{body}"
        );
        let message = body["message"].as_str().unwrap();
        assert!(message.starts_with("configuration error: "), "{message}");
        assert!(message.contains(named), "{named}: {message}");
        assert!(!message.contains('\n'), "{message}");
    }
    let res = gw.reload_with(ADMIN_TOKEN).await;
    let message = res.json::<Value>().await.unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains(gw.file.to_str().unwrap()),
        "the file is named: {message}"
    );

    // What was running still runs.
    assert_eq!(gw.plan_names().await, ["basic"]);
    assert_eq!(
        gw.app
            .call("/vedic/v1/kundli/full", &customer.api_key)
            .await
            .status(),
        200
    );
    used(&gw.app, customer.account_id, 5).await;
    // And no refused reload counted as a generation.
    gw.rewrite(&layer);
    assert_eq!(gw.reload().await, 2);
}

#[tokio::test]
async fn reloading_takes_the_admin_token_and_counts_wrong_ones() {
    let gw = spawn_from_files("[admin]\nfailures_per_hour = 2\n").await;
    gw.rewrite(&format!("[admin]\nfailures_per_hour = 2\n{BASIC}"));
    let res = gw
        .app
        .client
        .post(gw.app.url("/admin/v1/reload"))
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
    assert_error(gw.reload_with("wrong").await, 401, "UNAUTHORIZED").await;
    assert!(gw.plan_names().await.is_empty(), "nothing was reloaded");
    // Past the limit of failures from this address, even the right token waits.
    assert_error(gw.reload_with(ADMIN_TOKEN).await, 429, "TOO_MANY_REQUESTS").await;
    assert!(gw.plan_names().await.is_empty());
}

#[tokio::test]
async fn a_gateway_configured_in_code_has_no_files_to_read_again() {
    let app = spawn_app().await;
    let res = app
        .client
        .post(app.url("/admin/v1/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let body: Value = res.json().await.unwrap();
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("built in code"),
        "{body}"
    );
}

#[tokio::test]
async fn reloads_sent_together_take_turns() {
    let gw = spawn_from_files(BASIC).await;
    let (a, b, c) = tokio::join!(gw.reload(), gw.reload(), gw.reload());
    let mut generations = vec![a, b, c];
    generations.sort_unstable();
    assert_eq!(generations, [2, 3, 4]);
}
