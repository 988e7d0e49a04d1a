//! The console over plain HTTP: where it exists, who it lets in, what its cookies and
//! headers say, and which forms it refuses.

use reqwest::header::{COOKIE, LOCATION, RETRY_AFTER};
use sha2::Digest;

use super::*;

#[tokio::test]
async fn the_console_is_absent_without_an_admin_token() {
    let app = spawn_app_with(|c| c.admin.token = None).await;
    let client = manual_client();
    for path in [
        "/console",
        "/console/",
        "/console/sign-in",
        "/console/accounts",
    ] {
        let res = client.get(app.url(path)).send().await.unwrap();
        assert_eq!(res.status(), 404, "{path}");
    }
    let res = client
        .post(app.url("/console/sign-in"))
        .form(&[("token", "anything")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
}

#[tokio::test]
async fn every_console_page_without_a_valid_session_redirects_to_sign_in() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let client = manual_client();
    let account = format!("/console/accounts/{}", customer.account_id);
    for cookie in [
        None,
        Some("tollgate_console=tgc_forgedforgedforgedforgedforgedforged12"),
    ] {
        for path in [
            "/console/",
            "/console/accounts",
            "/console/accounts?q=x",
            account.as_str(),
        ] {
            let mut req = client.get(app.url(path));
            if let Some(cookie) = cookie {
                req = req.header(COOKIE, cookie);
            }
            let res = req.send().await.unwrap();
            assert_eq!(res.status(), 303, "{path} with {cookie:?}");
            assert_eq!(res.headers()[LOCATION], "/console/sign-in");
        }
        let mut req = client
            .post(app.url(&format!("{account}/top-ups")))
            .form(&[("calls", "100")]);
        if let Some(cookie) = cookie {
            req = req.header(COOKIE, cookie);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()[LOCATION], "/console/sign-in");
    }
    assert_eq!(app.usage_of(customer.account_id).await["credits"], 0);
}

#[tokio::test]
async fn sign_in_sets_a_strict_http_only_cookie_and_sign_out_revokes_the_session() {
    let app = spawn_app().await;
    let operator = Operator::sign_in(&app).await;
    // The cookie as the sign-in answer set it.
    let sign_in = manual_client()
        .get(app.url("/console/sign-in"))
        .send()
        .await
        .unwrap();
    let pre = set_cookie(&sign_in, "tollgate_console_sign_in").unwrap();
    assert!(
        pre.contains("HttpOnly") && pre.contains("SameSite=Strict"),
        "{pre}"
    );
    let session: String = operator.cookie.split('=').nth(1).unwrap().to_owned();
    let stored: Vec<u8> = sqlx::query_scalar("SELECT token_hash FROM console_session")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(stored, sha2::Sha256::digest(session.as_bytes()).to_vec());

    let overview = operator.get("/console/").await;
    assert_eq!(overview.status(), 200);
    let csrf = super::csrf_field(&overview.text().await.unwrap());
    let out = operator.post("/console/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(out.status(), 303);
    assert_eq!(out.headers()[LOCATION], "/console/sign-in");
    let cleared = set_cookie(&out, "tollgate_console").unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    // The old cookie opens nothing any more, on this replica or another.
    let again = operator.get("/console/").await;
    assert_eq!(again.status(), 303);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM console_session")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn the_session_cookie_has_its_flags_and_secure_only_under_tls() {
    let app = spawn_app().await;
    let client = manual_client();
    let form = client
        .get(app.url("/console/sign-in"))
        .send()
        .await
        .unwrap();
    let pre = cookie_pair(&set_cookie(&form, "tollgate_console_sign_in").unwrap());
    let csrf = csrf_field(&form.text().await.unwrap());
    let res = client
        .post(app.url("/console/sign-in"))
        .header(COOKIE, pre)
        .form(&[("csrf", csrf.as_str()), ("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    let cookie = set_cookie(&res, "tollgate_console").unwrap();
    for flag in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(flag), "{flag} in {cookie}");
    }
    assert!(!cookie.contains("Secure"), "{cookie}");

    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let tls = spawn_app_with(|c| {
        c.server.tls_cert = Some(cert_path.clone());
        c.server.tls_key = Some(key_path.clone());
    })
    .await;
    let operator = Operator::sign_in(&tls).await;
    assert!(operator.base.starts_with("https://"));
    let form = client
        .get(tls.url("/console/sign-in"))
        .send()
        .await
        .unwrap();
    let pre = set_cookie(&form, "tollgate_console_sign_in").unwrap();
    assert!(pre.ends_with("; Secure"), "{pre}");
    let csrf = csrf_field(&form.text().await.unwrap());
    let res = client
        .post(tls.url("/console/sign-in"))
        .header(COOKIE, cookie_pair(&pre))
        .form(&[("csrf", csrf.as_str()), ("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    let cookie = set_cookie(&res, "tollgate_console").unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.ends_with("; Secure"),
        "{cookie}"
    );
}

#[tokio::test]
async fn a_wrong_token_is_refused_and_repeated_failures_lock_sign_in() {
    let app = spawn_app_with(|c| c.admin.failures_per_hour = 3).await;
    let client = manual_client();
    let attempt = |token: &'static str| {
        let client = client.clone();
        let url = app.url("/console/sign-in");
        async move {
            let form = client.get(&url).send().await.unwrap();
            let pre = cookie_pair(&set_cookie(&form, "tollgate_console_sign_in").unwrap());
            let csrf = csrf_field(&form.text().await.unwrap());
            client
                .post(&url)
                .header(COOKIE, pre)
                .form(&[("csrf", csrf.as_str()), ("token", token)])
                .send()
                .await
                .unwrap()
        }
    };
    for _ in 0..3 {
        let res = attempt("not-the-token").await;
        assert_eq!(res.status(), 401);
        assert!(set_cookie(&res, "tollgate_console").is_none());
        assert!(
            res.text()
                .await
                .unwrap()
                .contains("That is not the admin token.")
        );
    }
    let locked = attempt(ADMIN_TOKEN).await;
    assert_eq!(locked.status(), 429);
    assert!(locked.headers().contains_key(RETRY_AFTER));
    assert!(set_cookie(&locked, "tollgate_console").is_none());
    // The page says how long, as Retry-After does (three an hour: twenty minutes), and
    // leads back to the sign-in form.
    let page = locked.text().await.unwrap();
    assert!(page.contains("Try again in 20 minutes."), "{page}");
    assert!(page.contains("href=\"/console/sign-in\""), "{page}");
}

#[tokio::test]
async fn forms_without_the_sessions_csrf_token_are_refused() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let operator = Operator::sign_in(&app).await;
    let top_ups = format!("/console/accounts/{}/top-ups", customer.account_id);
    let missing = operator.post(&top_ups, &[("calls", "100")]).await;
    assert_eq!(missing.status(), 403);
    assert!(missing.text().await.unwrap().contains("Forbidden"));
    let forged = operator
        .post(
            &top_ups,
            &[("csrf", "0".repeat(64).as_str()), ("calls", "100")],
        )
        .await;
    assert_eq!(forged.status(), 403);
    // Another session's token is no better.
    let other = Operator::sign_in(&app).await;
    let theirs = other.csrf().await;
    let crossed = operator
        .post(&top_ups, &[("csrf", theirs.as_str()), ("calls", "100")])
        .await;
    assert_eq!(crossed.status(), 403);
    let subscribe = operator
        .post(
            &format!("/console/accounts/{}/subscriptions", customer.account_id),
            &[
                ("csrf", "forged"),
                ("plan", "pro"),
                ("monthly_allowance", "9"),
            ],
        )
        .await;
    assert_eq!(subscribe.status(), 403);
    let sign_out = operator
        .post("/console/sign-out", &[("csrf", "forged")])
        .await;
    assert_eq!(sign_out.status(), 403);
    // Nothing changed, and the session still works.
    let usage = app.usage_of(customer.account_id).await;
    assert_eq!(
        (usage["credits"].as_i64(), usage["plan"].as_str()),
        (Some(0), Some("free"))
    );
    assert_eq!(operator.get("/console/").await.status(), 200);

    // The sign-in form is bound to its own cookie.
    let client = manual_client();
    let res = client
        .post(app.url("/console/sign-in"))
        .form(&[("csrf", "forged"), ("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    assert!(set_cookie(&res, "tollgate_console").is_none());
}

#[tokio::test]
async fn a_form_with_bad_figures_shows_why_on_the_account_page_and_a_good_one_redirects() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let operator = Operator::sign_in(&app).await;
    let csrf = operator.csrf().await;
    let account = format!("/console/accounts/{}", customer.account_id);
    let bad = operator
        .post(
            &format!("{account}/top-ups"),
            &[("csrf", &csrf), ("calls", "lots")],
        )
        .await;
    assert_eq!(bad.status(), 422);
    let page = bad.text().await.unwrap();
    assert!(page.contains("Units: give a whole number"), "{page}");
    assert!(
        page.contains(r#"value="lots""#),
        "the form keeps what was typed"
    );
    let free = operator
        .post(
            &format!("{account}/subscriptions"),
            &[
                ("csrf", &csrf),
                ("plan", "free"),
                ("monthly_allowance", "5"),
            ],
        )
        .await;
    assert_eq!(free.status(), 422);
    assert!(free.text().await.unwrap().contains("reserved"));

    let good = operator
        .post(
            &format!("{account}/subscriptions"),
            &[
                ("csrf", &csrf),
                ("plan", "pro"),
                ("monthly_allowance", "50,000"),
                ("enforcement", "hard"),
            ],
        )
        .await;
    assert_eq!(good.status(), 303);
    assert_eq!(good.headers()[LOCATION], account.as_str());
    let usage = app.usage_of(customer.account_id).await;
    assert_eq!(
        (usage["plan"].as_str(), usage["allowance"].as_i64()),
        (Some("pro"), Some(50_000))
    );
    assert_eq!(usage["enforcement"], "hard");
    // The message shows once.
    let shown = operator.get(&account).await.text().await.unwrap();
    assert!(
        shown.contains("Subscription ") && shown.contains(" added: pro, 50,000 units a month.")
    );
    let again = operator.get(&account).await.text().await.unwrap();
    assert!(!again.contains(" added: pro"));
    // The audit log shows the operator's subscription, newest first; the refused forms
    // recorded nothing.
    let audit = &again[again
        .find(r#"<section id="audit">"#)
        .expect("the audit log")..];
    let newest = &audit[audit.find("<tr data-audit-id=").expect("an event")..];
    let newest = newest.split("</tr>").next().unwrap();
    assert!(
        newest.contains(r#"data-action="subscription.activated""#),
        "{newest}"
    );
    assert!(newest.contains("admin from 127.0.0.1"), "{newest}");
    assert_eq!(audit.matches("<tr data-audit-id=").count(), 3, "{audit}");
    assert_eq!(operator.get("/console/accounts/999999").await.status(), 404);
    assert_eq!(operator.get("/console/accounts/abc").await.status(), 404);
}

#[tokio::test]
async fn console_answers_carry_the_security_headers() {
    let app = spawn_app().await;
    let operator = Operator::sign_in(&app).await;
    for res in [
        operator.get("/console/").await,
        operator.get("/console/accounts").await,
        manual_client()
            .get(app.url("/console/sign-in"))
            .send()
            .await
            .unwrap(),
        manual_client()
            .get(app.url("/console/"))
            .send()
            .await
            .unwrap(),
    ] {
        let url = res.url().clone();
        let headers = res.headers();
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(
            policy.contains("default-src 'none'") && policy.contains("style-src 'self'"),
            "{url}: {policy}"
        );
        assert!(policy.contains("frame-ancestors 'none'"), "{url}");
        assert_eq!(headers["x-frame-options"], "DENY", "{url}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{url}");
        assert_eq!(headers["cache-control"], "no-store", "{url}");
    }
    let css = operator.get("/console/console.css").await;
    assert_eq!(css.status(), 200);
    assert!(
        css.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
}

#[tokio::test]
async fn the_overview_counts_the_exhausted_accounts_and_ranks_the_busiest() {
    let app = spawn_app().await;
    let spent = app.signup().await;
    let credited = app.signup().await;
    let idle = app.signup().await;
    for customer in [&spent, &credited] {
        let res = app
            .admin_post(
                &format!("/admin/v1/accounts/{}/subscriptions", customer.account_id),
                &serde_json::json!({"plan": "tiny", "monthly_allowance": 2}),
            )
            .await;
        assert_eq!(res.status(), 201);
    }
    let res = app
        .admin_post(
            &format!("/admin/v1/accounts/{}/grants", credited.account_id),
            &serde_json::json!({"calls": 5, "expires_at": null}),
        )
        .await;
    assert_eq!(res.status(), 201);
    for (customer, calls) in [(&spent, 2), (&credited, 3), (&idle, 1)] {
        for _ in 0..calls {
            assert_eq!(
                app.call("/vedic/v1/x", &customer.api_key).await.status(),
                200
            );
        }
        app.wait_for_ledger(customer.account_id, calls).await;
    }
    let operator = Operator::sign_in(&app).await;
    let page = operator.get("/console/").await.text().await.unwrap();
    let exhausted =
        &page[page.find(r#"id="exhausted""#).unwrap()..page.find(r#"id="top""#).unwrap()];
    assert!(
        exhausted.contains(&format!(r#"data-account="{}""#, spent.account_id)),
        "{exhausted}"
    );
    assert!(!exhausted.contains(&format!(r#"data-account="{}""#, credited.account_id)));
    assert!(
        page.contains(r#"<dd id="exhausted-count">1</dd>"#),
        "{page}"
    );
    assert!(page.contains(r#"<dd id="calls-month">6</dd>"#), "{page}");
    // The busiest first.
    let top = &page[page.find(r#"id="top""#).unwrap()..];
    let order: Vec<usize> = [&credited, &spent, &idle]
        .iter()
        .map(|c| {
            top.find(&format!(r#"data-account="{}""#, c.account_id))
                .unwrap()
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{top}");

    let list = operator
        .get("/console/accounts?exhausted=on")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(list.matches("data-account=").count(), 1, "{list}");
    assert!(list.contains(&format!(r#"data-account="{}""#, spent.account_id)));
}

#[tokio::test]
async fn the_subscription_form_offers_the_catalogue_and_states_its_date_format() {
    let app = spawn_app_with(|c| {
        c.plans = vec![tollgate::config::PlanConfig {
            name: "pro".into(),
            monthly_allowance: 1000,
            daily_allowance: None,
            enforcement: Default::default(),
            price_id: None,
            checkout_url: None,
            features: vec![],
            rate_limit: None,
            ..Default::default()
        }];
    })
    .await;
    let customer = app.signup().await;
    let operator = Operator::sign_in(&app).await;
    let page = operator
        .get(&format!("/console/accounts/{}", customer.account_id))
        .await
        .text()
        .await
        .unwrap();
    // A list of catalogue plans, with free text still possible.
    assert!(page.contains(r#"name="plan" list="catalogue""#), "{page}");
    assert!(
        page.contains(r#"<datalist id="catalogue"><option value="pro">"#),
        "{page}"
    );
    // Dates are text in one stated format and zone, not the browser's locale.
    assert!(!page.contains("datetime-local"), "{page}");
    assert!(page.contains("Starts, UTC (YYYY-MM-DD HH:MM)"), "{page}");
    assert!(page.contains("Expires, UTC (YYYY-MM-DD HH:MM)"), "{page}");
}

#[tokio::test]
async fn the_account_page_lists_each_keys_name_expiry_scopes_last_use_and_rate_limit() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let expires_at = "2099-01-02T03:04:00Z";
    let res = app
        .client
        .post(app.url("/account/v1/keys"))
        .bearer_auth(&token)
        .json(&serde_json::json!({
            "name": "nightly batch",
            "expires_at": expires_at,
            "scopes": ["/western/v1/"],
            "rate_limit": {"per_second": 5, "burst": 10},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let made: serde_json::Value = res.json().await.unwrap();
    let key_id = made["key_id"].as_i64().unwrap();
    let api_key = made["api_key"].as_str().unwrap().to_owned();
    assert_eq!(app.call("/western/v1/natal", &api_key).await.status(), 200);
    app.state.last_used.flush(&app.db.pool).await.unwrap();

    let operator = Operator::sign_in(&app).await;
    let page = operator
        .get(&format!("/console/accounts/{}", customer.account_id))
        .await
        .text()
        .await
        .unwrap();
    let row = |id: i64| {
        let at = page
            .find(&format!("<tr data-key-id=\"{id}\""))
            .unwrap_or_else(|| panic!("key {id} in {page}"));
        page[at..].split("</tr>").next().unwrap().to_owned()
    };
    let made = row(key_id);
    assert!(
        made.contains(r#"<span class="key-name">nightly batch</span>"#),
        "{made}"
    );
    assert!(
        made.contains(r#"<td class="expires">2099-01-02 03:04 UTC</td>"#),
        "{made}"
    );
    assert!(
        made.contains(r#"<td class="scopes"><code>/western/v1/</code></td>"#),
        "{made}"
    );
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert!(
        made.contains(&format!(r#"<td class="last-used">{today} "#)),
        "{made}"
    );
    assert!(
        made.contains(r#"<td class="rate-limit">5/s, burst 10</td>"#),
        "{made}"
    );
    assert!(!made.contains(&api_key), "a whole key is never shown");
    // The sign-up key: named "default", never expires, both APIs, never used, no rate limit.
    let first = row(customer.key_id);
    for cell in [
        r#"<span class="key-name">default</span>"#,
        r#"<td class="expires">never</td>"#,
        r#"<td class="scopes"><code>/vedic/v1/</code><br><code>/western/v1/</code></td>"#,
        r#"<td class="last-used">never</td>"#,
        r#"<td class="rate-limit">none</td>"#,
    ] {
        assert!(first.contains(cell), "{cell} in {first}");
    }
}

#[tokio::test]
async fn the_account_page_shows_the_months_calls_by_route_and_key_and_a_latency_chart() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let token = app.login(&customer).await;
    let res = app
        .client
        .post(app.url("/account/v1/keys"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"name": "nightly batch"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let made: serde_json::Value = res.json().await.unwrap();
    let (second_id, second) = (
        made["key_id"].as_i64().unwrap(),
        made["api_key"].as_str().unwrap(),
    );
    for _ in 0..3 {
        let res = app
            .call("/vedic/v1/horoscope/daily", &customer.api_key)
            .await;
        assert_eq!(res.status(), 200);
    }
    for path in ["/vedic/v1/slow/200", "/vedic/v1/status/503"] {
        app.call(path, second).await;
    }
    app.wait_for_ledger(customer.account_id, 5).await;

    let operator = Operator::sign_in(&app).await;
    let account = format!("/console/accounts/{}", customer.account_id);
    let page = operator.get(&account).await.text().await.unwrap();
    let section = |id: &str| {
        let at = page
            .find(&format!("<section id=\"{id}\">"))
            .unwrap_or_else(|| panic!("{id} in {page}"));
        page[at..].split("</section>").next().unwrap().to_owned()
    };
    let row = |section: &str, attr: &str| {
        let at = section
            .find(&format!("<tr {attr}>"))
            .unwrap_or_else(|| panic!("{attr} in {section}"));
        section[at..].split("</tr>").next().unwrap().to_owned()
    };
    let routes = section("calls-by-route");
    let horoscope = row(&routes, r#"data-route="/vedic/v1/horoscope""#);
    assert!(horoscope.contains(r#"data-calls="3""#), "{horoscope}");
    let slow = row(&routes, r#"data-route="/vedic/v1/slow""#);
    assert!(slow.contains(r#"data-calls="1""#), "{slow}");
    let status = row(&routes, r#"data-route="/vedic/v1/status""#);
    assert!(status.contains(r#"data-errors="1""#), "{status}");
    // The slow call's latency reads about 200 ms at every percentile (a busy machine may
    // add a few milliseconds to the upstream's sleep).
    let cells: Vec<f64> = slow
        .split("<td class=\"num\">")
        .skip(2)
        .map(|cell| cell.split('<').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(cells.len(), 3, "{slow}");
    assert!(cells.iter().all(|ms| (196.0..240.0).contains(ms)), "{slow}");

    let keys = section("calls-by-key");
    let first = row(&keys, &format!(r#"data-key="{}""#, customer.key_id));
    assert!(first.contains(r#"data-calls="3""#), "{first}");
    assert!(
        first.contains(r#"<span class="key-name">default</span>"#),
        "{first}"
    );
    assert!(first.contains(&format!("<code>{}…</code>", &customer.api_key[..12])));
    let batch = row(&keys, &format!(r#"data-key="{second_id}""#));
    assert!(batch.contains(r#"data-calls="2""#) && batch.contains(r#"data-errors="1""#));
    assert!(batch.contains(">nightly batch<"), "{batch}");

    let chart = section("latency");
    assert!(chart.contains("<svg"), "{chart}");
    assert_eq!(chart.matches("<g class=\"series\"").count(), 3, "{chart}");
    for series in ["p50", "p95", "p99"] {
        assert!(
            chart.contains(&format!("data-series=\"{series}\"")),
            "{chart}"
        );
    }

    // A month without calls says so, with neither tables nor chart.
    let month = tollgate::month::Month::containing(chrono::Utc::now());
    let before = tollgate::month::Month::containing(month.start() - chrono::Duration::days(1));
    let page = operator
        .get(&format!("{account}?month={before}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("No calls in this month"), "{page}");
    assert!(!page.contains("<section id=\"latency\">"), "{page}");
}
