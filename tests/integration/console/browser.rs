//! An operator's walk through the console in Debian's headless Chromium, driven through
//! chromedriver (WebDriver) on a free port: sign in, search, open an account, read its
//! chart, top it up, meet a forged form, sign out; and read an account's calls by route
//! and key and its latency chart. Each page is saved as a PNG under
//! `target/console-screenshots/`. `scripts/ensure-chromium.sh` installs the browser.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chrono::{Datelike, Utc};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tollgate::month::Month;
use tollgate::usage::analytics::histogram::Histogram;

use crate::common::*;

/// A chromedriver of this test's own, and a headless Chromium session on it.
pub(crate) struct Browser {
    pub(crate) client: Client,
    _driver: Child,
    shots: PathBuf,
}

fn executable(env: &str, candidates: &[&str]) -> String {
    std::env::var(env)
        .ok()
        .into_iter()
        .chain(candidates.iter().map(|c| c.to_string()))
        .find(|path| Path::new(path).exists())
        .unwrap_or_else(|| panic!("no {} here: run scripts/ensure-chromium.sh", candidates[0]))
}

impl Browser {
    async fn start() -> Self {
        Self::start_saving_to("console-screenshots").await
    }

    /// A browser whose screenshots go to `target/<folder>/`.
    pub(crate) async fn start_saving_to(folder: &str) -> Self {
        let driver_bin = executable("CHROMEDRIVER", &["/usr/bin/chromedriver"]);
        let chromium = executable(
            "CHROMIUM_BINARY",
            &["/usr/lib/chromium/chromium", "/usr/bin/chromium"],
        );
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            // Its own process group, which Chromium joins: see `Drop`.
            .process_group(0)
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let status = reqwest::Client::builder().no_proxy().build().unwrap();
        let ready = eventually(Duration::from_secs(20), || {
            let req = status.get(format!("{url}/status"));
            async move { req.send().await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        assert!(ready, "chromedriver did not answer on port {port}");
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--no-proxy-server", "--window-size=1280,1700", "--hide-scrollbars"],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&url)
            .await
            .expect("a Chromium session");
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap()
            .join(folder);
        std::fs::create_dir_all(&shots).unwrap();
        Browser {
            client,
            _driver: driver,
            shots,
        }
    }

    pub(crate) async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
    }

    /// Saves the element `selector` alone, scrolled into view, as `<name>.png`.
    pub(crate) async fn screenshot_of(&self, selector: &str, name: &str) {
        let png = self.css(selector).await.screenshot().await.unwrap();
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
    }

    /// Scrolls `selector` to the top of the window (then [`Browser::screenshot`] shows it
    /// in its page).
    pub(crate) async fn scroll_to(&self, selector: &str) {
        self.css(selector).await;
        self.client
            .execute(
                "document.querySelector(arguments[0]).scrollIntoView();",
                vec![json!(selector)],
            )
            .await
            .unwrap();
    }

    pub(crate) async fn path(&self) -> String {
        self.client.current_url().await.unwrap().path().to_owned()
    }

    /// Ends the WebDriver session. Every check of the walk has passed by then, so a
    /// session that does not end cleanly (a busy machine's Chromium can be slow to quit,
    /// or gone) is reported, not failed: `Drop` ends the processes either way.
    pub(crate) async fn close(self) {
        let closing = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close());
        match closing.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("the WebDriver session did not end cleanly: {e}"),
            Err(_) => eprintln!("the WebDriver session did not end within 10 s"),
        }
    }

    /// Clicks `selector` (a link or a form's button) and waits until its answer has
    /// replaced the page. chromedriver may return from a click before a form's
    /// navigation starts, and a page that posts back to itself keeps its path, so
    /// what tells the answer has loaded is the old document going stale.
    pub(crate) async fn follow(&self, selector: &str) {
        let old = self.client.find(Locator::Css("html")).await.unwrap();
        self.css(selector).await.click().await.unwrap();
        let replaced = eventually(Duration::from_secs(10), || {
            let old = old.clone();
            async move { old.tag_name().await.is_err() }
        })
        .await;
        assert!(replaced, "{selector} on {} led nowhere", self.path().await);
    }

    /// Waits until the page's path is `path` (a form's answer has loaded).
    pub(crate) async fn wait_for_path(&self, path: &str) {
        let arrived = eventually(Duration::from_secs(10), || async {
            self.path().await == path
        })
        .await;
        assert!(arrived, "still on {} instead of {path}", self.path().await);
    }

    pub(crate) async fn css(&self, selector: &str) -> fantoccini::elements::Element {
        let found = self
            .client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(selector))
            .await;
        match found {
            Ok(element) => element,
            Err(e) => {
                self.screenshot("failure").await;
                let source = self.client.source().await.unwrap_or_default();
                panic!("{selector} on {}: {e}\n{source}", self.path().await)
            }
        }
    }

    pub(crate) async fn text(&self, selector: &str) -> String {
        self.css(selector).await.text().await.unwrap()
    }

    pub(crate) async fn bars(&self, selector: &str) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for bar in self.client.find_all(Locator::Css(selector)).await.unwrap() {
            let day = bar.attr("data-day").await.unwrap().unwrap();
            let calls = bar
                .attr("data-calls")
                .await
                .unwrap()
                .unwrap()
                .parse()
                .unwrap();
            out.push((day, calls));
        }
        out
    }
}

/// Days of this month before today with calls of `key_id` on `route`, written into the
/// analytics rollup as accounting would: 100 calls a day, 90 at a latency that wanders
/// between 35 and 54 ms, 8 at three times it and 2 at eight times it (so p50, p95 and
/// p99 read about 1×, 3× and 8×), but for every fourth day, which had no calls (a gap in
/// the chart). Returns the calls written.
pub(crate) async fn latency_history(
    app: &TestApp,
    key_id: i64,
    account_id: i64,
    route: &str,
) -> i64 {
    let today = Utc::now().date_naive();
    let mut day = Month::containing(Utc::now()).start().date_naive();
    let mut written = 0;
    while day < today {
        let n = i64::from(day.day());
        if n % 4 != 0 {
            let base = (35 + (n * 7) % 20) as u64 * 1_000;
            let mut latency = Histogram::default();
            for (calls, factor) in [(90, 1), (8, 3), (2, 8)] {
                for _ in 0..calls {
                    latency.record(base * factor);
                }
            }
            sqlx::query(
                "INSERT INTO usage_rollup (key_id, day, route, account_id, calls, units, errors, latency)
                 VALUES ($1, $2, $3, $4, 100, 100, $5, $6)",
            )
            .bind(key_id)
            .bind(day)
            .bind(route)
            .bind(account_id)
            .bind(n % 3)
            .bind(latency.counts())
            .execute(&app.db.pool)
            .await
            .unwrap();
            written += 100;
        }
        day += chrono::Duration::days(1);
    }
    written
}

impl Drop for Browser {
    /// Ends chromedriver and the Chromium it started, even when the test failed before
    /// closing its session (killing chromedriver alone would leave Chromium behind).
    fn drop(&mut self) {
        if let Some(pid) = self._driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}

#[tokio::test]
async fn an_operator_signs_in_finds_an_account_tops_it_up_and_signs_out_in_a_browser() {
    let app = spawn_app().await;
    let customer = app.signup().await;
    let _another = app.signup().await;
    for _ in 0..3 {
        assert_eq!(
            app.call("/vedic/v1/horoscope", &customer.api_key)
                .await
                .status(),
            200
        );
    }
    app.wait_for_ledger(customer.account_id, 3).await;
    // Five calls more on the month's first day, as accounting counts them per day.
    let now = Utc::now();
    let first = Month::containing(now).start();
    sqlx::query(
        "INSERT INTO usage_daily_closed (account_id, day_start, calls, used)
         VALUES ($1, $2, 5, 5)
         ON CONFLICT (account_id, day_start)
         DO UPDATE SET calls = usage_daily_closed.calls + 5, used = usage_daily_closed.used + 5",
    )
    .bind(customer.account_id)
    .bind(first)
    .execute(&app.db.pool)
    .await
    .unwrap();
    let today = now.day() as usize;
    // A second key with a limit of one unit, used up.
    let session = app.login(&customer).await;
    let created: Value = app
        .client
        .post(app.url("/account/v1/keys"))
        .bearer_auth(&session)
        .json(&json!({"monthly_limit": 1}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let limited_key = created["key_id"].as_i64().unwrap();
    let limited = created["api_key"].as_str().unwrap();
    assert_eq!(app.call("/vedic/v1/horoscope", limited).await.status(), 200);
    app.wait_for_ledger(customer.account_id, 4).await;

    let browser = Browser::start().await;
    let c = &browser.client;

    // Without a session, any page leads to the sign-in page.
    c.goto(&app.url("/console/accounts")).await.unwrap();
    browser.wait_for_path("/console/sign-in").await;
    browser.screenshot("sign-in").await;
    browser
        .css("#token")
        .await
        .send_keys(ADMIN_TOKEN)
        .await
        .unwrap();
    browser.follow("section.signin button[type=submit]").await;
    browser.wait_for_path("/console/").await;
    assert_eq!(browser.text("#calls-month").await, "9");
    assert_eq!(browser.bars("figure.chart rect.bar").await.len(), today);
    browser.screenshot("overview").await;

    // Search the account by its email.
    browser
        .follow("header nav a[href='/console/accounts']")
        .await;
    browser.wait_for_path("/console/accounts").await;
    browser
        .css("#q")
        .await
        .send_keys(&customer.email)
        .await
        .unwrap();
    browser.follow("form.search button").await;
    let searched = eventually(Duration::from_secs(10), || async {
        c.current_url()
            .await
            .unwrap()
            .query()
            .is_some_and(|q| q.contains("q="))
    })
    .await;
    assert!(searched);
    let rows = c
        .find_all(Locator::Css("table.accounts tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].attr("data-account").await.unwrap(),
        Some(customer.account_id.to_string())
    );
    browser.screenshot("accounts").await;

    // Its page: one bar per day of the month so far, with the day's calls.
    rows[0]
        .find(Locator::Css("a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let account = format!("/console/accounts/{}", customer.account_id);
    browser.wait_for_path(&account).await;
    let bars = browser.bars("#usage rect.bar").await;
    assert_eq!(bars.len(), today);
    assert_eq!(bars[0].0, first.date_naive().to_string());
    let expected: Vec<i64> = (1..=today)
        .map(|d| if d == 1 { 5 } else { 0 } + if d == today { 4 } else { 0 })
        .collect();
    assert_eq!(bars.iter().map(|b| b.1).collect::<Vec<_>>(), expected);
    assert_eq!(browser.text("#used").await, "4");
    // Each key's use this month and its limit (none, and the second key used up).
    let key_row = format!("#keys tr[data-key-id='{}']", customer.key_id);
    assert_eq!(browser.text(&format!("{key_row} td[data-used]")).await, "3");
    assert_eq!(
        browser.text(&format!("{key_row} td:nth-child(6)")).await,
        "none"
    );
    let limited_row = format!("#keys tr[data-key-id='{limited_key}']");
    assert_eq!(
        browser.text(&format!("{limited_row} td[data-limit]")).await,
        "1"
    );
    assert_eq!(
        browser.text(&format!("{limited_row} .badge")).await,
        "used up"
    );
    let keys = browser.text("#keys").await;
    assert!(keys.contains(&customer.api_key[..12]), "{keys}");
    assert!(
        !keys.contains(&customer.api_key),
        "a whole key is never shown"
    );
    browser.screenshot("account").await;

    // A top-up through the form: back on the account with a message, and the usage
    // object the customer reads has the credit.
    browser
        .css("#add-top-up input[name=calls]")
        .await
        .send_keys("500")
        .await
        .unwrap();
    browser.follow("#add-top-up button").await;
    let flash = browser.text("p.flash.done").await;
    assert!(flash.contains("500 units"), "{flash}");
    browser.wait_for_path(&account).await;
    assert_eq!(browser.text("#credits").await, "500");
    let usage: Value = app
        .client
        .get(app.url("/account/v1/usage"))
        .header("x-api-key", &customer.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (usage["credits"].as_i64(), usage["remaining"].as_i64()),
        (Some(500), Some(3_496))
    );
    browser.screenshot("account-topped-up").await;

    // The same form with a forged token is refused and changes nothing.
    c.execute(
        "document.querySelector('#add-top-up input[name=csrf]').value = arguments[0];",
        vec![json!("0".repeat(64))],
    )
    .await
    .unwrap();
    browser
        .css("#add-top-up input[name=calls]")
        .await
        .send_keys("7")
        .await
        .unwrap();
    browser.follow("#add-top-up button").await;
    assert_eq!(browser.text("section.problem h1").await, "Forbidden");
    browser.screenshot("forged-form").await;
    assert_eq!(app.usage_of(customer.account_id).await["credits"], 500);

    // Sign out: the session is gone, and pages lead to the sign-in page again.
    c.goto(&app.url(&account)).await.unwrap();
    browser.follow("form.signout button").await;
    browser.wait_for_path("/console/sign-in").await;
    c.goto(&app.url(&account)).await.unwrap();
    browser.wait_for_path("/console/sign-in").await;
    browser.close().await;
}

#[tokio::test]
async fn an_operator_reads_an_accounts_calls_by_route_and_key_and_its_latency_in_a_browser() {
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
    let (batch_id, batch) = (
        created["key_id"].as_i64().unwrap(),
        created["api_key"].as_str().unwrap(),
    );
    for _ in 0..3 {
        let res = app
            .call("/vedic/v1/horoscope/daily", &customer.api_key)
            .await;
        assert_eq!(res.status(), 200);
    }
    for path in [
        "/vedic/v1/slow/40",
        "/vedic/v1/slow/120",
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

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&app.url("/console/sign-in")).await.unwrap();
    browser
        .css("#token")
        .await
        .send_keys(ADMIN_TOKEN)
        .await
        .unwrap();
    browser.follow("section.signin button[type=submit]").await;
    browser.wait_for_path("/console/").await;
    let account = format!("/console/accounts/{}", customer.account_id);
    c.goto(&app.url(&account)).await.unwrap();
    browser.wait_for_path(&account).await;

    // The tables read as the analytics API does: every route and key, most calls first.
    for (group, table, attr) in [
        ("route", "#calls-by-route", "data-route"),
        ("key", "#calls-by-key", "data-key"),
    ] {
        let report: Value = app
            .admin_get(&format!(
                "/admin/v1/accounts/{}/analytics?group_by={group}",
                customer.account_id
            ))
            .await
            .json()
            .await
            .unwrap();
        let expected: Vec<(String, String)> = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let id = match &r[if group == "key" { "key_id" } else { "route" }] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (id, r["calls"].to_string())
            })
            .collect();
        let mut shown = Vec::new();
        for row in c
            .find_all(Locator::Css(&format!("{table} tbody tr")))
            .await
            .unwrap()
        {
            let id = row.attr(attr).await.unwrap().unwrap();
            let calls = row.find(Locator::Css("td[data-calls]")).await.unwrap();
            shown.push((id, calls.text().await.unwrap().replace(',', "")));
        }
        assert_eq!(shown, expected, "{table}");
    }
    let first_row = format!("#calls-by-key tr[data-key='{}']", customer.key_id);
    assert_eq!(
        browser
            .text(&format!("{first_row} td[data-calls]"))
            .await
            .replace(',', ""),
        (history + 3).to_string()
    );
    assert_eq!(
        browser
            .text(&format!(
                "#calls-by-key tr[data-key='{batch_id}'] .key-name"
            ))
            .await,
        "nightly batch"
    );
    browser.scroll_to("#calls-by-route").await;
    browser.screenshot("account-analytics").await;

    // The chart: three series, each with today's point.
    let today = Utc::now().date_naive().to_string();
    for series in ["p50", "p95", "p99"] {
        let at = format!("#latency g[data-series={series}] circle[data-day='{today}']");
        browser.css(&at).await;
    }
    assert_eq!(
        c.find_all(Locator::Css("#latency g.series"))
            .await
            .unwrap()
            .len(),
        3
    );
    browser
        .screenshot_of("#latency figure", "account-latency")
        .await;
    browser.close().await;
}
