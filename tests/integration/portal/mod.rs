//! The customer portal (SPEC §12) over plain HTTP: who it lets in, what its cookies and
//! headers say, which forms it refuses, and that its figures and forms are the account
//! API's.

mod browser;
mod budget;
mod http;
mod keys;

use reqwest::header::{COOKIE, HeaderMap, LOCATION};
use reqwest::{Client, Response};

use crate::common::*;
use crate::console::{cookie_pair, csrf_field, manual_client, set_cookie};

/// A customer signed in to the portal over plain HTTP.
struct Visitor {
    client: Client,
    base: String,
    /// `tollgate_portal=tgs_…`
    cookie: String,
    /// The first API key, shown once on sign-up.
    api_key: String,
}

/// The sign-up (or sign-in) form's cookie and token.
async fn blank_form(app: &TestApp, path: &str) -> (String, String) {
    let form = manual_client().get(app.url(path)).send().await.unwrap();
    assert_eq!(form.status(), 200, "{path}");
    let pre = cookie_pair(&set_cookie(&form, "tollgate_portal_form").unwrap());
    (pre, csrf_field(&form.text().await.unwrap()))
}

impl Visitor {
    /// Signs up a fresh account through the portal; panics unless it lets them in.
    /// Also returns the sign-up answer's headers and page.
    async fn sign_up(app: &TestApp) -> (Self, HeaderMap, String) {
        let (pre, csrf) = blank_form(app, "/portal/sign-up").await;
        let email = format!("{}@example.com", uuid::Uuid::new_v4().simple());
        let client = manual_client();
        let res = client
            .post(app.url("/portal/sign-up"))
            .header(COOKIE, pre)
            .form(&[
                ("csrf", csrf.as_str()),
                ("email", &email),
                ("password", "correct horse battery"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let cookie = cookie_pair(&set_cookie(&res, "tollgate_portal").unwrap());
        let headers = res.headers().clone();
        let page = res.text().await.unwrap();
        let api_key = between(&page, "<code>", "</code>").to_owned();
        assert!(api_key.starts_with("tgk_"), "{page}");
        let visitor = Visitor {
            client,
            base: app.base.clone(),
            cookie,
            api_key,
        };
        (visitor, headers, page)
    }

    /// The session token, which is also a bearer token of the account API.
    fn token(&self) -> &str {
        self.cookie.split_once('=').unwrap().1
    }

    async fn get(&self, path: &str) -> Response {
        self.client
            .get(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .send()
            .await
            .unwrap()
    }

    /// A page's HTML, which must answer 200.
    async fn page(&self, path: &str) -> String {
        let res = self.get(path).await;
        assert_eq!(res.status(), 200, "{path}");
        res.text().await.unwrap()
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Response {
        self.client
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .form(form)
            .send()
            .await
            .unwrap()
    }

    /// The CSRF token of this session, read from a page's form.
    async fn csrf(&self) -> String {
        csrf_field(&self.page("/portal/").await)
    }

    /// `GET {path}` of the account API with this session.
    async fn api(&self, path: &str) -> serde_json::Value {
        let res = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(self.token())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{path}");
        res.json().await.unwrap()
    }
}

/// The text of `html` between the first `start` and the next `end`.
fn between<'a>(html: &'a str, start: &str, end: &str) -> &'a str {
    let at = html
        .find(start)
        .unwrap_or_else(|| panic!("{start} in {html}"))
        + start.len();
    let len = html[at..].find(end).unwrap();
    &html[at..at + len]
}

/// The figure `id` of the overview, as a number (thousands separators dropped).
fn figure(html: &str, id: &str) -> String {
    let block = between(html, &format!("data-figure=\"{id}\""), "</div>");
    between(block, "<dd>", "</dd>").replace(',', "")
}

/// Asserts `res` redirects (303) to `to`.
fn assert_redirect(res: &Response, to: &str) {
    assert_eq!(res.status(), 303);
    assert_eq!(res.headers()[LOCATION], to);
}
