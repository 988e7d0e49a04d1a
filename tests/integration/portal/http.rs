//! The portal over plain HTTP: redirects, cookies and headers, CSRF and foreign-id
//! refusals, and figures and forms equal to the account API's.

use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, SET_COOKIE, X_FRAME_OPTIONS};
use serde_json::{Value, json};
use tollgate::config::{Config, PlanConfig};
use tollgate::plan::RateLimitInput;
use tollgate::usage::rules::Enforcement;

use super::*;

pub(super) const DAILY: &str = "/vedic/v1/horoscope/daily";

#[tokio::test]
async fn every_portal_page_without_a_session_redirects_to_sign_in_even_without_an_admin_token() {
    let app = spawn_app_with(|c| c.admin.token = None).await;
    let client = manual_client();
    for cookie in [
        None,
        Some("tollgate_portal=tgs_forgedforgedforgedforgedforged1234"),
    ] {
        for path in ["/portal/", "/portal/keys", "/portal/plans"] {
            let mut req = client.get(app.url(path));
            if let Some(cookie) = cookie {
                req = req.header(COOKIE, cookie);
            }
            let res = req.send().await.unwrap();
            assert_redirect(&res, "/portal/sign-in");
        }
        for path in ["/portal/keys", "/portal/keys/1/revoke", "/portal/redeem"] {
            let mut req = client.post(app.url(path)).form(&[("csrf", "x")]);
            if let Some(cookie) = cookie {
                req = req.header(COOKIE, cookie);
            }
            assert_redirect(&req.send().await.unwrap(), "/portal/sign-in");
        }
    }
    for path in ["/portal/sign-in", "/portal/sign-up", "/portal/portal.css"] {
        let res = client.get(app.url(path)).send().await.unwrap();
        assert_eq!(res.status(), 200, "{path}");
    }
    let res = client.get(app.url("/portal")).send().await.unwrap();
    assert_eq!(res.status(), 308);
}

#[tokio::test]
async fn sign_up_opens_a_strict_http_only_session_for_the_portal_only() {
    let app = spawn_app().await;
    let (visitor, headers, page) = Visitor::sign_up(&app).await;
    let session = headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|v| v.starts_with("tollgate_portal=tgs_"))
        .unwrap();
    for part in ["; Path=/portal;", "; HttpOnly;", "; SameSite=Strict;"] {
        assert!(session.contains(part), "{session}");
    }
    assert!(!session.contains("Secure"), "{session}");
    assert!(
        headers[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    assert_eq!(headers[X_FRAME_OPTIONS], "DENY");
    assert!(page.contains("shown only now"), "{page}");
    // The key shown works, and the session is the account's: the account API takes it.
    assert_eq!(app.call(DAILY, &visitor.api_key).await.status(), 200);
    let keys = visitor.api("/account/v1/keys").await;
    assert_eq!(keys.as_array().unwrap().len(), 1);
    assert!(visitor.page("/portal/").await.contains("Overview"));

    // Signing out ends the session everywhere.
    let csrf = visitor.csrf().await;
    let res = visitor.post("/portal/sign-out", &[("csrf", &csrf)]).await;
    assert_redirect(&res, "/portal/sign-in");
    assert_redirect(&visitor.get("/portal/").await, "/portal/sign-in");
}

#[tokio::test]
async fn under_tls_the_portals_cookies_are_secure() {
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
    assert!(tls.base.starts_with("https://"));
    let form = manual_client()
        .get(tls.url("/portal/sign-up"))
        .send()
        .await
        .unwrap();
    let pre = set_cookie(&form, "tollgate_portal_form").unwrap();
    assert!(
        pre.contains("Path=/portal;") && pre.ends_with("; Secure"),
        "{pre}"
    );
    let (_, headers, _) = Visitor::sign_up(&tls).await;
    let session = headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|v| v.starts_with("tollgate_portal=tgs_"))
        .unwrap();
    assert!(
        session.contains("HttpOnly") && session.ends_with("; Secure"),
        "{session}"
    );
}

#[tokio::test]
async fn sign_in_takes_the_accounts_email_and_password_under_the_login_limit() {
    let app = spawn_app_with(|c| c.account.login_failures_per_hour = 2).await;
    let customer = app.signup().await;
    let try_sign_in = |password: &'static str| {
        let app = &app;
        let email = customer.email.clone();
        async move {
            let (pre, csrf) = blank_form(app, "/portal/sign-in").await;
            manual_client()
                .post(app.url("/portal/sign-in"))
                .header(COOKIE, pre)
                .form(&[
                    ("csrf", csrf.as_str()),
                    ("email", &email),
                    ("password", password),
                ])
                .send()
                .await
                .unwrap()
        }
    };
    let res = try_sign_in("correct horse battery").await;
    assert_redirect(&res, "/portal/");
    let cookie = set_cookie(&res, "tollgate_portal").unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    for _ in 0..2 {
        assert_eq!(try_sign_in("wrong password!").await.status(), 401);
    }
    // Past the limit even the right password is refused, as by /account/v1/login.
    let res = try_sign_in("correct horse battery").await;
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
}

#[tokio::test]
async fn the_overview_shows_the_figures_of_the_usage_report_and_the_days_units() {
    let app = spawn_app().await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &visitor.api_key).await.status(), 200);
    }
    let account_id = visitor.api("/account/v1/usage").await["account_id"]
        .as_i64()
        .unwrap();
    app.wait_for_ledger(account_id, 3).await;
    let report = visitor.api("/account/v1/usage").await;
    let page = visitor.page("/portal/").await;
    assert_eq!(figure(&page, "plan"), report["plan"].as_str().unwrap());
    for field in ["allowance", "used", "remaining", "credits"] {
        assert_eq!(figure(&page, field), report[field].to_string(), "{field}");
    }
    assert_eq!(report["used"], 3);
    let month_end: chrono::DateTime<chrono::Utc> =
        report["month_end"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        figure(&page, "month_end"),
        month_end.format("%Y-%m-%d %H:%M UTC").to_string()
    );
    let today = chrono::Utc::now().date_naive().to_string();
    assert!(
        page.contains(&format!(
            r#"data-day="{today}" data-calls="3" data-units="3""#
        )),
        "{page}"
    );
    // The free plan has no daily window.
    assert!(!page.contains("data-figure=\"daily_allowance\""));
}

#[tokio::test]
async fn the_overview_shows_this_months_calls_by_route_and_key_and_a_latency_chart() {
    let app = spawn_app().await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    let page = visitor.page("/portal/").await;
    assert!(page.contains("No calls yet this month"), "{page}");
    assert!(!page.contains("<section id=\"latency\">"), "{page}");

    let res = visitor
        .client
        .post(format!("{}/account/v1/keys", visitor.base))
        .bearer_auth(visitor.token())
        .json(&json!({"name": "nightly batch"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let second: Value = res.json().await.unwrap();
    let second_key = second["api_key"].as_str().unwrap();
    let second_id = second["key_id"].as_i64().unwrap();
    for _ in 0..3 {
        assert_eq!(app.call(DAILY, &visitor.api_key).await.status(), 200);
    }
    assert_eq!(
        app.call("/western/v1/chart/natal", second_key)
            .await
            .status(),
        200
    );
    assert_eq!(
        app.call("/vedic/v1/status/503", second_key).await.status(),
        503
    );
    let keys = visitor.api("/account/v1/keys").await;
    let account_id = visitor.api("/account/v1/usage").await["account_id"]
        .as_i64()
        .unwrap();
    app.wait_for_ledger(account_id, 5).await;

    let page = visitor.page("/portal/").await;
    assert!(!page.contains("No calls yet this month"), "{page}");
    let routes = between(&page, "<section id=\"calls-by-route\">", "</section>");
    let route = |route: &str| between(routes, &format!("<tr data-route=\"{route}\">"), "</tr>");
    // Most calls first, each with its calls and upstream errors and three percentiles.
    assert!(routes.find("/vedic/v1/horoscope") < routes.find("/vedic/v1/status"));
    for (name, calls, errors) in [
        ("/vedic/v1/horoscope", 3, 0),
        ("/vedic/v1/status", 1, 1),
        ("/western/v1/chart", 1, 0),
    ] {
        let row = route(name);
        assert!(row.contains(&format!("data-calls=\"{calls}\"")), "{row}");
        assert!(row.contains(&format!("data-errors=\"{errors}\"")), "{row}");
        assert_eq!(
            row.matches("<td class=\"num\">").count(),
            4,
            "units and p50/p95/p99: {row}"
        );
    }
    assert_eq!(routes.matches("<tr data-route=").count(), 3, "{routes}");

    let by_key = between(&page, "<section id=\"calls-by-key\">", "</section>");
    let first_id = keys[0]["key_id"].as_i64().unwrap();
    let first = between(by_key, &format!("<tr data-key=\"{first_id}\">"), "</tr>");
    assert!(first.contains("data-calls=\"3\""), "{first}");
    assert!(
        first.contains("<span class=\"key-name\">default</span>"),
        "{first}"
    );
    let prefix = keys[0]["prefix"].as_str().unwrap();
    assert!(
        first.contains(&format!("<code>{prefix}…</code>")),
        "{first}"
    );
    let second = between(by_key, &format!("<tr data-key=\"{second_id}\">"), "</tr>");
    assert!(second.contains("data-calls=\"2\"") && second.contains("data-errors=\"1\""));
    assert!(second.contains(">nightly batch<"), "{second}");
    assert!(!page.contains(&visitor.api_key) && !page.contains(second_key));

    // The chart: an SVG with the three percentiles, each with a point today.
    let chart = between(&page, "<section id=\"latency\">", "</section>");
    assert!(chart.contains("<svg"), "{chart}");
    assert!(chart.contains("data-measured=\"1\""), "{chart}");
    let today = chrono::Utc::now().date_naive().to_string();
    for series in ["p50", "p95", "p99"] {
        let group = between(chart, &format!("data-series=\"{series}\">"), "</g>");
        assert_eq!(
            group.matches(&format!("data-day=\"{today}\"")).count(),
            1,
            "{group}"
        );
    }
    assert_eq!(chart.matches("<g class=\"series\"").count(), 3, "{chart}");
}

#[tokio::test]
async fn forms_without_the_sessions_token_are_refused_and_change_nothing() {
    let app = spawn_app().await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    let key_id = visitor.api("/account/v1/keys").await[0]["key_id"]
        .as_i64()
        .unwrap();
    let other = csrf_field(
        &manual_client()
            .get(app.url("/portal/sign-in"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    let revoke = format!("/portal/keys/{key_id}/revoke");
    let limit = format!("/portal/keys/{key_id}/limit");
    let roll = format!("/portal/keys/{key_id}/roll");
    for csrf in [None, Some("forged"), Some(other.as_str())] {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut form: Vec<(&str, &str)> = extra.to_vec();
            if let Some(csrf) = csrf {
                form.push(("csrf", csrf));
            }
            form
        };
        for (path, form) in [
            ("/portal/keys", with(&[("monthly_limit", "5")])),
            (revoke.as_str(), with(&[])),
            (limit.as_str(), with(&[("monthly_limit", "5")])),
            (roll.as_str(), with(&[("grace_hours", "1")])),
            ("/portal/redeem", with(&[("code", "tgr_x")])),
            ("/portal/sign-out", with(&[])),
        ] {
            let res = visitor.post(path, &form).await;
            assert_eq!(res.status(), 403, "{path} with {csrf:?}");
        }
    }
    let keys = visitor.api("/account/v1/keys").await;
    assert_eq!(keys.as_array().unwrap().len(), 1);
    assert_eq!(keys[0]["revoked_at"], Value::Null);
    assert_eq!(keys[0]["expires_at"], Value::Null);
    assert_eq!(keys[0]["monthly_limit"], Value::Null);
    assert!(visitor.page("/portal/").await.contains("Overview"));

    // Sign-up with a token not bound to its cookie makes no account.
    let (_, csrf) = blank_form(&app, "/portal/sign-up").await;
    let (pre, _) = blank_form(&app, "/portal/sign-up").await;
    let res = manual_client()
        .post(app.url("/portal/sign-up"))
        .header(COOKIE, pre)
        .form(&[
            ("csrf", csrf.as_str()),
            ("email", "eve@example.com"),
            ("password", "long enough pw"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let accounts: i64 =
        sqlx::query_scalar("SELECT count(*) FROM account WHERE email = 'eve@example.com'")
            .fetch_one(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(accounts, 0);
}

#[tokio::test]
async fn plans_link_to_checkout_for_this_account_and_codes_are_redeemed() {
    let app = spawn_app_with(with_plans).await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    let account_id = visitor.api("/account/v1/usage").await["account_id"]
        .as_i64()
        .unwrap();
    let page = visitor.page("/portal/plans").await;
    let pro = between(&page, "data-plan=\"pro\"", "</tr>");
    let href = between(pro, "href=\"", "\"").replace("&amp;", "&");
    let url = reqwest::Url::parse(&href).unwrap();
    assert_eq!(url.host_str(), Some("buy.stripe.com"));
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    assert!(
        pairs.contains(&("client_reference_id".into(), account_id.to_string())),
        "{href}"
    );
    assert!(
        pairs.contains(&("prefilled_email".into(), "x".into())),
        "{href}"
    );
    let team = between(&page, "data-plan=\"team\"", "</tr>");
    assert!(!team.contains("href"), "{team}");

    let res = app
        .admin_post(
            "/admin/v1/codes",
            &json!({"plan": "pro", "months": 1, "count": 1, "expires_at": null}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let code = res.json::<Value>().await.unwrap()["codes"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let csrf = visitor.csrf().await;
    let res = visitor
        .post("/portal/redeem", &[("csrf", &csrf), ("code", &code)])
        .await;
    assert_redirect(&res, "/portal/?done=redeemed");
    let page = visitor.page("/portal/?done=redeemed").await;
    assert!(page.contains("The code is redeemed"), "{page}");
    assert_eq!(figure(&page, "plan"), "pro");
    assert_eq!(figure(&page, "allowance"), "10000");
    assert_eq!(figure(&page, "daily_allowance"), "1000");

    // Failed attempts count as the account API counts them: two, then refused.
    let res = visitor
        .post("/portal/redeem", &[("csrf", &csrf), ("code", &code)])
        .await;
    assert_eq!(res.status(), 409);
    let res = visitor
        .post("/portal/redeem", &[("csrf", &csrf), ("code", "tgr_nope")])
        .await;
    assert_eq!(res.status(), 404);
    let res = visitor
        .post("/portal/redeem", &[("csrf", &csrf), ("code", &code)])
        .await;
    assert_eq!(res.status(), 429);
}

#[tokio::test]
async fn the_plans_page_shows_each_plans_features_and_rate_limit_and_marks_the_current_plan() {
    let app = spawn_app_with(with_plans).await;
    let (visitor, _, _) = Visitor::sign_up(&app).await;
    let page = visitor.page("/portal/plans").await;
    let pro = between(&page, "data-plan=\"pro\"", "</tr>");
    assert_eq!(
        between(pro, r#"<td class="features">"#, "</td>"),
        r#"<code class="feature">synastry</code>, <code class="feature">transits</code>"#
    );
    assert!(pro.contains(r#"<td class="rate-limit">—</td>"#), "{pro}");
    let team = between(&page, "data-plan=\"team\"", "</tr>");
    assert!(team.contains(r#"<td class="features">—</td>"#), "{team}");
    assert!(
        team.contains(r#"<td class="rate-limit">10 calls a second, bursts of 20</td>"#),
        "{team}"
    );
    // A new account is on the free plan, which has no features by default.
    let current = between(&page, "id=\"current-plan\"", "</p>");
    assert!(current.contains("<strong>free</strong>"), "{current}");
    let includes = between(&page, "id=\"current-features\"", "</p>");
    assert!(includes.contains("no features"), "{includes}");
    assert!(!page.contains("your plan"), "{page}");

    // On pro, the page marks it and says what it includes, as the entitlements do.
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
    let csrf = visitor.csrf().await;
    let res = visitor
        .post("/portal/redeem", &[("csrf", &csrf), ("code", &code)])
        .await;
    assert_redirect(&res, "/portal/?done=redeemed");
    let page = visitor.page("/portal/plans").await;
    let pro = between(&page, "data-plan=\"pro\"", "</tr>");
    assert!(pro.contains("aria-current=\"true\""), "{pro}");
    assert!(pro.contains("your plan"), "{pro}");
    let team = between(&page, "data-plan=\"team\"", "</tr>");
    assert!(!team.contains("your plan"), "{team}");
    let includes = between(&page, "id=\"current-features\"", "</p>");
    assert!(
        includes.contains(
            r#"<code class="feature">synastry</code>, <code class="feature">transits</code>"#
        ),
        "{includes}"
    );
    let entitlements = visitor.api("/account/v1/entitlements").await;
    assert_eq!(entitlements["plan"], "pro");
    assert_eq!(entitlements["features"], json!(["synastry", "transits"]));
}

pub(super) fn with_plans(c: &mut Config) {
    c.plans = vec![
        PlanConfig {
            name: "pro".into(),
            monthly_allowance: 10_000,
            daily_allowance: Some(1_000),
            enforcement: Enforcement::Hard,
            price_id: Some("price_pro".into()),
            checkout_url: Some("https://buy.stripe.com/test_pro?prefilled_email=x".into()),
            features: vec!["synastry".into(), "transits".into()],
            rate_limit: None,
            ..PlanConfig::default()
        },
        PlanConfig {
            name: "team".into(),
            monthly_allowance: 50_000,
            daily_allowance: None,
            enforcement: Enforcement::Soft,
            price_id: None,
            checkout_url: None,
            features: vec![],
            rate_limit: Some(RateLimitInput {
                per_second: 10,
                burst: Some(20),
            }),
            ..PlanConfig::default()
        },
    ];
    c.account.login_failures_per_hour = 2;
}
