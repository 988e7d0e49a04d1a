//! The portal's keys page over plain HTTP (SPEC §12, §13, §15): keys made, limited,
//! revoked and rolled through its forms, each as the account API would.

use serde_json::Value;

use super::*;

use super::http::*;

#[tokio::test]
async fn another_accounts_key_is_not_found() {
    let app = spawn_app().await;
    let (ann, _, _) = Visitor::sign_up(&app).await;
    let (bob, _, _) = Visitor::sign_up(&app).await;
    let anns_key = ann.api("/account/v1/keys").await[0]["key_id"]
        .as_i64()
        .unwrap();
    let csrf = bob.csrf().await;
    for path in [
        format!("/portal/keys/{anns_key}/revoke"),
        format!("/portal/keys/{anns_key}/limit"),
        format!("/portal/keys/{anns_key}/roll"),
        "/portal/keys/not-a-number/revoke".to_owned(),
        "/portal/keys/not-a-number/roll".to_owned(),
        "/portal/keys/99999999/limit".to_owned(),
    ] {
        let res = bob
            .post(&path, &[("csrf", &csrf), ("monthly_limit", "1")])
            .await;
        assert_eq!(res.status(), 404, "{path}");
    }
    let keys = ann.api("/account/v1/keys").await;
    assert_eq!(keys.as_array().unwrap().len(), 1, "nothing rolled");
    assert_eq!(keys[0]["revoked_at"], Value::Null);
    assert_eq!(keys[0]["expires_at"], Value::Null);
    assert_eq!(keys[0]["monthly_limit"], Value::Null);
    assert_eq!(app.call(DAILY, &ann.api_key).await.status(), 200);
    // Bob's page lists only Bob's key.
    let page = bob.page("/portal/keys").await;
    assert!(
        !page.contains(&format!("data-key-id=\"{anns_key}\"")),
        "{page}"
    );
}

#[tokio::test]
async fn keys_are_created_once_shown_limited_and_revoked() {
    let app = spawn_app().await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    let csrf = visitor.csrf().await;
    let res = visitor
        .post("/portal/keys", &[("csrf", &csrf), ("monthly_limit", "2")])
        .await;
    assert_eq!(res.status(), 201);
    let page = res.text().await.unwrap();
    let new_key = between(&page, "<pre class=\"secret\"", "</code>");
    let new_key = new_key.rsplit("<code>").next().unwrap().to_owned();
    assert!(new_key.starts_with("tgk_"), "{page}");
    let keys = visitor.api("/account/v1/keys").await;
    let key_id = keys[1]["key_id"].as_i64().unwrap();
    assert_eq!(keys[1]["monthly_limit"], 2);
    // The key list does not show it again.
    assert!(!visitor.page("/portal/keys").await.contains(&new_key));

    // Exhausting the limit: the third call is refused, the first key unaffected.
    for _ in 0..2 {
        assert_eq!(app.call(DAILY, &new_key).await.status(), 200);
    }
    let refused = app.call(DAILY, &new_key).await;
    assert_error(refused, 429, "KEY_QUOTA_EXCEEDED").await;
    assert_eq!(app.call(DAILY, &visitor.api_key).await.status(), 200);
    // The key's use shows once the ledger has it.
    let used_up = eventually(std::time::Duration::from_secs(10), || async {
        let page = visitor.page("/portal/keys").await;
        between(&page, &format!("data-key-id=\"{key_id}\""), "</tr>").contains(r#"data-used="2""#)
    })
    .await;
    assert!(used_up);
    let page = visitor.page("/portal/keys").await;
    let row = between(&page, &format!("data-key-id=\"{key_id}\""), "</tr>");
    assert!(
        row.contains(r#"data-used="2""#) && row.contains(r#"data-limit="2""#),
        "{row}"
    );

    let limit = format!("/portal/keys/{key_id}/limit");
    let res = visitor
        .post(&limit, &[("csrf", &csrf), ("monthly_limit", "5")])
        .await;
    assert_redirect(&res, "/portal/keys?done=limit");
    assert_eq!(visitor.api("/account/v1/keys").await[1]["monthly_limit"], 5);
    let res = visitor
        .post(&limit, &[("csrf", &csrf), ("monthly_limit", "")])
        .await;
    assert_redirect(&res, "/portal/keys?done=limit");
    assert_eq!(
        visitor.api("/account/v1/keys").await[1]["monthly_limit"],
        Value::Null
    );
    let res = visitor
        .post(&limit, &[("csrf", &csrf), ("monthly_limit", "-1")])
        .await;
    assert_eq!(res.status(), 422);

    let res = visitor
        .post(&format!("/portal/keys/{key_id}/revoke"), &[("csrf", &csrf)])
        .await;
    assert_redirect(&res, "/portal/keys?done=revoked");
    assert!(
        visitor
            .page("/portal/keys?done=revoked")
            .await
            .contains("The key is revoked.")
    );
    assert_ne!(
        visitor.api("/account/v1/keys").await[1]["revoked_at"],
        Value::Null
    );
    assert_eq!(app.call(DAILY, &new_key).await.status(), 401);

    // The overview's audit log shows each change as the account's, newest first; the
    // refused limit changed nothing and shows nothing.
    let overview = visitor.page("/portal/").await;
    let audit = between(&overview, "<section id=\"audit\">", "</section>");
    let newest = between(audit, "<tr data-audit-id=", "</tr>");
    assert!(newest.contains(r#"data-action="key.revoked""#), "{newest}");
    assert!(newest.contains("account from 127.0.0.1"), "{newest}");
    assert!(
        newest.contains(&format!("<code>key:{key_id}</code>")),
        "{newest}"
    );
    let actions: Vec<Value> = visitor.api("/account/v1/audit").await["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].clone())
        .collect();
    assert_eq!(
        actions,
        [
            "key.revoked",
            "key.changed",
            "key.changed",
            "key.created",
            "key.created",
            "subscription.activated"
        ]
    );
}

/// The row of key `key_id` on a keys page.
fn key_row(page: &str, key_id: i64) -> &str {
    between(page, &format!("<tr data-key-id=\"{key_id}\""), "</tr>")
}

/// The `datetime` of the first `<time>` in `html`.
fn time_in(html: &str) -> chrono::DateTime<chrono::Utc> {
    between(html, "<time datetime=\"", "\"").parse().unwrap()
}

#[tokio::test]
async fn a_key_made_with_a_name_an_expiry_and_scopes_is_listed_with_them() {
    let app = spawn_app().await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    let csrf = visitor.csrf().await;
    let expiry = (chrono::Utc::now() + chrono::Duration::days(30))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let res = visitor
        .post(
            "/portal/keys",
            &[
                ("csrf", &csrf),
                ("name", "  ci deploy "),
                ("expires_at", &expiry),
                ("scope_western", "/western/v1/"),
                ("scope_paths", "/vedic/v1/panchang/"),
                ("monthly_limit", ""),
            ],
        )
        .await;
    assert_eq!(res.status(), 201);
    let page = res.text().await.unwrap();
    assert!(page.contains("All times are UTC."), "{page}");
    let shown = between(&page, "<pre class=\"secret\"", "</pre>");
    let new_key = between(shown, "<code>", "</code>").to_owned();
    assert!(new_key.starts_with("tgk_"), "{page}");
    let key_id: i64 = between(shown, "data-key-id=\"", "\"").parse().unwrap();

    // The list shows the key's name, expiry (as entered, in UTC), scopes, and no use yet.
    let page = visitor.page("/portal/keys").await;
    assert!(!page.contains(&new_key), "a key is shown only once");
    let row = key_row(&page, key_id);
    assert!(row.contains(r#"<td class="name">ci deploy</td>"#), "{row}");
    let expires = between(row, r#"<td class="expires">"#, "</td>");
    assert!(expires.contains(&expiry.replace('T', " ")), "{expires}");
    assert_eq!(
        time_in(expires).format("%Y-%m-%dT%H:%M").to_string(),
        expiry
    );
    let scopes = between(row, r#"<td class="scopes">"#, "</td>");
    assert_eq!(
        scopes,
        "<code>/western/v1/</code><br><code>/vedic/v1/panchang/</code>"
    );
    assert!(row.contains(r#"<td class="last-used">never</td>"#), "{row}");
    assert!(row.contains(r#"<td class="rate-limit">none</td>"#), "{row}");
    // The sign-up key: named "default", no expiry, both APIs.
    let first = visitor.api("/account/v1/keys").await[0]["key_id"]
        .as_i64()
        .unwrap();
    let row = key_row(&page, first);
    assert!(row.contains(r#"<td class="name">default</td>"#), "{row}");
    assert!(row.contains(r#"<td class="expires">never</td>"#), "{row}");
    assert!(
        row.contains("<code>/vedic/v1/</code><br><code>/western/v1/</code>"),
        "{row}"
    );

    // The scopes hold: a vedic daily horoscope is outside them, a western call inside.
    assert_error(app.call(DAILY, &new_key).await, 403, "KEY_SCOPE_DENIED").await;
    assert_eq!(app.call("/western/v1/natal", &new_key).await.status(), 200);
    app.state.last_used.flush(&app.db.pool).await.unwrap();
    let page = visitor.page("/portal/keys").await;
    let last_used = between(key_row(&page, key_id), r#"<td class="last-used">"#, "</td>");
    let at = time_in(last_used);
    assert!(
        (chrono::Utc::now() - at).num_seconds().abs() < 120,
        "{last_used}"
    );

    // Refusals say what is wrong in the form's words, and make no key.
    for (field, value, says) in [
        (
            "expires_at",
            "2020-01-01T00:00",
            "Expires must be in the future",
        ),
        (
            "expires_at",
            "next week",
            "Expires must be a date and time in UTC",
        ),
        (
            "scope_paths",
            "/admin/v1/",
            "Paths must each be /vedic/v1/ or /western/v1/",
        ),
        ("name", "\u{7}", "Name must be 1 to 64 printable characters"),
    ] {
        let res = visitor
            .post("/portal/keys", &[("csrf", &csrf), (field, value)])
            .await;
        assert_eq!(res.status(), 422, "{field}={value}");
        let page = res.text().await.unwrap();
        assert!(page.contains(says), "{field}={value}: {page}");
        assert!(
            page.contains(r#"href="/portal/keys""#),
            "a way back: {page}"
        );
    }
    assert_eq!(
        visitor
            .api("/account/v1/keys")
            .await
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn rolling_a_key_shows_the_new_key_once_and_when_the_old_one_ends() {
    let app = spawn_app().await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    let csrf = visitor.csrf().await;
    let old = visitor.api("/account/v1/keys").await[0].clone();
    let old_id = old["key_id"].as_i64().unwrap();
    let old_prefix = old["prefix"].as_str().unwrap().to_owned();
    // Each live key has a roll form that defaults to a day's grace.
    let page = visitor.page("/portal/keys").await;
    let form = between(
        key_row(&page, old_id),
        &format!("action=\"/portal/keys/{old_id}/roll\""),
        "</form>",
    );
    assert!(
        form.contains(r#"name="grace_hours""#) && form.contains(r#"value="24""#),
        "{form}"
    );

    let asked = chrono::Utc::now();
    let res = visitor
        .post(
            &format!("/portal/keys/{old_id}/roll"),
            &[("csrf", &csrf), ("grace_hours", "2")],
        )
        .await;
    assert_eq!(res.status(), 201);
    let page = res.text().await.unwrap();
    let shown = between(&page, "<pre class=\"secret\"", "</pre>");
    let new_key = between(shown, "<code>", "</code>").to_owned();
    let new_id: i64 = between(shown, "data-key-id=\"", "\"").parse().unwrap();
    assert!(
        new_key.starts_with("tgk_") && new_key != visitor.api_key,
        "{page}"
    );
    assert!(page.contains("Key rolled."), "{page}");
    let end = between(&page, "id=\"old-key-end\"", "</p>");
    assert!(
        end.contains(&format!("<code>{old_prefix}…</code>")),
        "{end}"
    );
    assert!(end.contains(" UTC"), "{end}");
    let ends_at = time_in(end);
    let two_hours = asked + chrono::Duration::hours(2);
    assert!((ends_at - two_hours).num_seconds().abs() < 60, "{end}");
    // What the page says is what the account API says.
    let keys = visitor.api("/account/v1/keys").await;
    let api_end: chrono::DateTime<chrono::Utc> =
        keys[0]["expires_at"].as_str().unwrap().parse().unwrap();
    assert!(
        (api_end - ends_at).num_seconds().abs() <= 1,
        "{api_end} vs {end}"
    );
    assert_eq!(keys[1]["key_id"], new_id);
    assert_eq!(keys[1]["name"], "default");

    // Both keys work during the grace; the list shows the old key's end, never the new key.
    assert_eq!(app.call(DAILY, &new_key).await.status(), 200);
    assert_eq!(app.call(DAILY, &visitor.api_key).await.status(), 200);
    let page = visitor.page("/portal/keys").await;
    assert!(!page.contains(&new_key), "a key is shown only once");
    let expires = between(key_row(&page, old_id), r#"<td class="expires">"#, "</td>");
    assert_eq!(time_in(expires), ends_at);
    assert!(key_row(&page, new_id).contains(r#"<td class="name">default</td>"#));

    // A grace that is not whole hours up to a week is refused in the form's words.
    let res = visitor
        .post(
            &format!("/portal/keys/{new_id}/roll"),
            &[("csrf", &csrf), ("grace_hours", "200")],
        )
        .await;
    assert_eq!(res.status(), 422);
    assert!(
        res.text()
            .await
            .unwrap()
            .contains("Grace must be a whole number of hours from 0 to 168")
    );

    // No grace: the key it replaces is refused at once as expired, and cannot be rolled.
    let res = visitor
        .post(
            &format!("/portal/keys/{new_id}/roll"),
            &[("csrf", &csrf), ("grace_hours", "0")],
        )
        .await;
    assert_eq!(res.status(), 201);
    assert_error(app.call(DAILY, &new_key).await, 401, "KEY_EXPIRED").await;
    let res = visitor
        .post(
            &format!("/portal/keys/{new_id}/roll"),
            &[("csrf", &csrf), ("grace_hours", "1")],
        )
        .await;
    assert_eq!(res.status(), 409);
    assert!(res.text().await.unwrap().contains("revoked or expired"));
    let page = visitor.page("/portal/keys").await;
    let row = key_row(&page, new_id);
    assert!(row.contains("expired"), "{row}");
    assert!(
        !row.contains("/roll\""),
        "no roll form on an expired key: {row}"
    );
}
