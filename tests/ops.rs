//! Operations and the usage route as callers see them: the usage route's `month`
//! parameter.

mod common;

use common::spawn_app;
use reqwest::StatusCode;
use serde_json::Value;

/// Status, code and message of an error answer.
async fn refusal(res: reqwest::Response) -> (StatusCode, String, String) {
    let status = res.status();
    let body: Value = res.json().await.expect("error bodies are JSON");
    (
        status,
        body["code"].as_str().unwrap_or_default().to_owned(),
        body["message"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn usage_months_outside_1970_01_to_9999_11_or_malformed_are_refused_with_the_reason() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let usage = |month: &str| {
        app.client
            .get(app.url("/account/v1/usage"))
            .query(&[("month", month)])
            .header("x-api-key", &customer.api_key)
            .send()
    };
    for (month, why) in [
        ("2026-13", "month 13 is not 01–12"),
        ("2026-00", "month 00 is not 01–12"),
        ("0000-01", "month must be between 1970-01 and 9999-11"),
        ("1969-12", "month must be between 1970-01 and 9999-11"),
        ("9999-12", "month must be between 1970-01 and 9999-11"),
        ("2026-1", "month must be YYYY-MM"),
        (" 2026-01", "month must be YYYY-MM"),
    ] {
        assert_eq!(
            refusal(usage(month).await.unwrap()).await,
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "VALIDATION_FAILED".into(),
                why.into()
            ),
            "{month:?}"
        );
    }
    let last: Value = usage("9999-11").await.unwrap().json().await.unwrap();
    assert_eq!(last["month_end"], "9999-12-01T00:00:00Z", "{last}");
    let first: Value = usage("1970-01").await.unwrap().json().await.unwrap();
    assert_eq!(first["month_start"], "1970-01-01T00:00:00Z", "{first}");

    // The admin route shares the rule.
    let res = app
        .admin_get(&format!(
            "/admin/v1/accounts/{}/usage?month=9999-12",
            customer.account_id
        ))
        .await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
}
