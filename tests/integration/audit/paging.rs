//! Reading the log: newest first, a page at a time along `next_cursor`, `limit` 1 to
//! 200; the account API shows an account its own events only.

use std::collections::HashSet;

use super::*;
use crate::common::*;

/// The ids of every page of `path` (a query string already begun) read `limit` at a
/// time along `next_cursor`, and the number of pages.
async fn walk(app: &TestApp, path: &str, token: Option<&str>, limit: i64) -> (Vec<i64>, usize) {
    let mut ids = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let url = format!("{path}&limit={limit}&cursor={cursor}");
        let res = match token {
            Some(token) => send(app, Method::GET, &url, token, None).await,
            None => app.admin_get(&url).await,
        };
        assert_eq!(res.status(), 200, "{url}");
        let page: Value = res.json().await.unwrap();
        pages += 1;
        let events = page["events"].as_array().unwrap();
        assert!(events.len() as i64 <= limit, "{page}");
        ids.extend(events.iter().map(|e| e["id"].as_i64().unwrap()));
        match page["next_cursor"].as_str() {
            Some(next) => {
                assert_eq!(next, events.last().unwrap()["id"].to_string());
                cursor = next.to_owned();
            }
            None => {
                assert!(page["next_cursor"].is_null(), "{page}");
                return (ids, pages);
            }
        }
    }
}

/// Asserts a `422 VALIDATION_FAILED` whose message names `field`.
async fn assert_refused(res: reqwest::Response, field: &str) {
    assert_eq!(res.status(), 422, "{field}");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["code"], "VALIDATION_FAILED", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(field), "{field}: {message}");
}

#[tokio::test]
async fn pages_run_newest_first_along_the_cursor_to_the_end() {
    let app = audit_app(|_| {}).await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    for name in ["a", "b", "c", "d", "e"] {
        let body = json!({"name": name});
        let res = send(&app, Method::POST, "/account/v1/keys", &token, Some(body)).await;
        assert_eq!(res.status(), 201);
    }
    // Signup's two rows and five keys.
    let whole = send(&app, Method::GET, "/account/v1/audit", &token, None).await;
    assert_eq!(whole.status(), 200);
    let whole: Value = whole.json().await.unwrap();
    assert_eq!(whole["next_cursor"], Value::Null);
    let all: Vec<i64> = whole["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(all.len(), 7);
    assert!(all.windows(2).all(|w| w[0] > w[1]), "newest first: {all:?}");
    assert_eq!(whole["events"][0]["detail"]["name"], "e");

    let (paged, pages) = walk(&app, "/account/v1/audit?", Some(&token), 3).await;
    assert_eq!((paged.clone(), pages), (all.clone(), 3));
    let (paged, _) = walk(&app, "/account/v1/audit?", Some(&token), 7).await;
    assert_eq!(paged, all, "a full last page says there is no next one");
    let admin = format!("/admin/v1/audit?account_id={}", customer.account_id);
    let (paged, pages) = walk(&app, &admin, None, 2).await;
    assert_eq!((paged, pages), (all.clone(), 4));
    let (paged, _) = walk(&app, "/admin/v1/audit?action=key.created", None, 200).await;
    assert_eq!(paged.len(), 6, "signup's key and five");

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("limit=-1", "limit"),
        ("limit=ten", "limit"),
        ("cursor=abc", "cursor"),
        ("cursor=-5", "cursor"),
    ] {
        let account = format!("/account/v1/audit?{query}");
        assert_refused(send(&app, Method::GET, &account, &token, None).await, field).await;
        let admin = format!("/admin/v1/audit?{query}");
        assert_refused(app.admin_get(&admin).await, field).await;
    }
    assert_refused(
        app.admin_get("/admin/v1/audit?action=key.deleted").await,
        "action",
    )
    .await;
    assert_refused(
        app.admin_get("/admin/v1/audit?account_id=ann").await,
        "account_id",
    )
    .await;
    for query in ["limit=1", "limit=200", "cursor=", "colour=red"] {
        let path = format!("/account/v1/audit?{query}");
        let res = send(&app, Method::GET, &path, &token, None).await;
        assert_eq!(res.status(), 200, "{query}");
        assert_eq!(
            app.admin_get(&format!("/admin/v1/audit?{query}"))
                .await
                .status(),
            200,
            "{query}"
        );
    }
}

#[tokio::test]
async fn an_account_reads_its_own_events_and_never_anothers() {
    let app = audit_app(|_| {}).await;
    let ann = app.signup().await;
    let bob = app.signup().await;
    let ann_token = app.login(&ann).await;
    let bob_token = app.login(&bob).await;
    for token in [&ann_token, &bob_token, &ann_token] {
        let res = send(&app, Method::POST, "/account/v1/keys", token, None).await;
        assert_eq!(res.status(), 201);
    }
    let bobs: HashSet<i64> = events_of(&app, bob.account_id)
        .await
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(bobs.len(), 3);

    let (ids, _) = walk(&app, "/account/v1/audit?", Some(&ann_token), 1).await;
    assert_eq!(ids.len(), 4, "signup's two rows and two keys");
    assert!(ids.iter().all(|id| !bobs.contains(id)), "{ids:?} {bobs:?}");
    let res = send(
        &app,
        Method::GET,
        "/account/v1/audit?limit=200",
        &ann_token,
        None,
    )
    .await;
    let page: Value = res.json().await.unwrap();
    for event in page["events"].as_array().unwrap() {
        assert_eq!(event["account_id"], ann.account_id, "{event}");
    }
    // A cursor from Bob's page still reads only Ann's.
    let below = bobs.iter().max().unwrap() + 1;
    let url = format!("/account/v1/audit?cursor={below}");
    let res = send(&app, Method::GET, &url, &ann_token, None).await;
    let page: Value = res.json().await.unwrap();
    for event in page["events"].as_array().unwrap() {
        assert_eq!(event["account_id"], ann.account_id, "{event}");
    }

    // Sessions only: an API key, no credentials, or a wrong token read nothing.
    let res = app
        .client
        .get(app.url("/account/v1/audit"))
        .header("x-api-key", &ann.api_key)
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
    let res = send(&app, Method::GET, "/account/v1/audit", "tgs_nope", None).await;
    assert_error(res, 401, "UNAUTHORIZED").await;
    let res = app
        .client
        .get(app.url("/admin/v1/audit"))
        .bearer_auth(&ann_token)
        .send()
        .await
        .unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
}
