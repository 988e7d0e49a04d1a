//! Operations and the usage route as callers see them: `/readyz` while migrations are
//! pending, `/openapi.json` with and without the admin API, the usage route's `month`
//! parameter and its 401.

use std::sync::Arc;

use crate::common::{TestApp, TestDb, spawn_app, spawn_app_with, spawn_with_pool, test_config};
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::Value;
use tollgate_testkit::upstream::UpstreamServer;

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

#[tokio::test]
async fn the_usage_route_401_says_it_takes_a_session_or_an_api_key() {
    let app = spawn_app_with(|c| c.upstream.key_header = "x-customer-key".into()).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let res = app
        .client
        .delete(app.url(&format!("/account/v1/keys/{}", customer.key_id)))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);

    let revoked_key = app
        .client
        .get(app.url("/account/v1/usage"))
        .header("x-customer-key", &customer.api_key)
        .send()
        .await
        .unwrap();
    let nothing = app
        .client
        .get(app.url("/account/v1/usage"))
        .send()
        .await
        .unwrap();
    let bad_session = app
        .client
        .get(app.url("/account/v1/usage"))
        .bearer_auth("tgs_not-a-session")
        .send()
        .await
        .unwrap();
    for res in [revoked_key, nothing, bad_session] {
        let (status, code, message) = refusal(res).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNAUTHORIZED, "UNAUTHORIZED")
        );
        assert!(message.contains("Authorization: Bearer"), "{message}");
        assert!(message.contains("x-customer-key"), "{message}");
        assert!(
            !message.contains("Missing or invalid bearer token"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn readyz_is_503_until_every_migration_is_applied() {
    let db = Arc::new(TestDb::migrated_to(Some(3)).await);
    let upstream = Arc::new(UpstreamServer::start().await.unwrap());
    let mut config = test_config(&db, &upstream);
    config.database.migrate_on_start = false;
    let app = spawn_with_pool(db.clone(), upstream, config, db.pool.clone()).await;
    let readyz = || app.client.get(app.url("/readyz")).send();

    let (status, code, message) = refusal(readyz().await.unwrap()).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE")
    );
    assert!(message.contains("migration"), "{message}");

    // A database refinery never ran on has no history table at all.
    let rename = |from: &str, to: &str| format!("ALTER TABLE {from} RENAME TO {to}");
    sqlx::query(&rename("refinery_schema_history", "history_aside"))
        .execute(&db.pool)
        .await
        .unwrap();
    let (status, _, message) = refusal(readyz().await.unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{message}");
    sqlx::query(&rename("history_aside", "refinery_schema_history"))
        .execute(&db.pool)
        .await
        .unwrap();

    tollgate::db::migrate(&SecretString::from(db.url.clone()))
        .await
        .unwrap();
    assert_eq!(readyz().await.unwrap().status(), StatusCode::OK);
    assert_eq!(readyz().await.unwrap().status(), StatusCode::OK);
}

/// Paths and security schemes of the served OpenAPI document.
async fn openapi_of(app: &TestApp) -> (Vec<String>, Vec<String>, Value) {
    let doc: Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    (
        keys(&doc["paths"]),
        keys(&doc["components"]["securitySchemes"]),
        doc,
    )
}

#[tokio::test]
async fn openapi_lists_the_admin_api_only_when_it_is_on() {
    let on = spawn_app().await;
    let (paths, schemes, doc) = openapi_of(&on).await;
    assert!(
        paths.contains(&"/admin/v1/reconcile".to_owned()),
        "{paths:?}"
    );
    assert!(schemes.contains(&"admin".to_owned()), "{schemes:?}");
    assert!(doc.to_string().contains("SubscriptionRequest"));

    let off = spawn_app_with(|c| c.admin.token = None).await;
    let (paths, schemes, doc) = openapi_of(&off).await;
    assert!(paths.contains(&"/account/v1/usage".to_owned()), "{paths:?}");
    assert!(!paths.iter().any(|p| p.starts_with("/admin/")), "{paths:?}");
    assert!(!schemes.contains(&"admin".to_owned()), "{schemes:?}");
    assert!(schemes.contains(&"session".to_owned()), "{schemes:?}");
    let text = doc.to_string();
    assert!(
        !text.contains("SubscriptionRequest"),
        "admin schemas left in"
    );
}
