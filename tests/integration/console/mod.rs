//! The operator console (SPEC §10): plain HTTP checks of its redirects, cookies, CSRF
//! refusals and headers (`http`), and an operator's walk through it in headless
//! Chromium driven over WebDriver (`browser`).

pub(crate) mod browser;
mod budget;
mod http;

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Client, Response, redirect};

use crate::common::*;

/// A client that shows redirects instead of following them, and keeps no cookies.
pub(crate) fn manual_client() -> Client {
    Client::builder()
        .no_proxy()
        .danger_accept_invalid_certs(true)
        .redirect(redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `Set-Cookie` header of `res` setting `name`.
pub(crate) fn set_cookie(res: &Response, name: &str) -> Option<String> {
    res.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

/// `name=value` of a `Set-Cookie` header, as a request sends it back.
pub(crate) fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_owned()
}

/// The value of the hidden `csrf` field of the first form in `html`.
pub(crate) fn csrf_field(html: &str) -> String {
    let at =
        html.find(r#"name="csrf" value=""#).expect("a csrf field") + r#"name="csrf" value=""#.len();
    html[at..].split('"').next().unwrap().to_owned()
}

/// An operator signed in over plain HTTP.
struct Operator {
    client: Client,
    base: String,
    /// `tollgate_console=…`
    cookie: String,
}

impl Operator {
    /// Signs in with the admin token; panics unless the console lets them in.
    async fn sign_in(app: &TestApp) -> Self {
        let client = manual_client();
        let form = client
            .get(app.url("/console/sign-in"))
            .send()
            .await
            .unwrap();
        assert_eq!(form.status(), 200);
        let pre = cookie_pair(&set_cookie(&form, "tollgate_console_sign_in").unwrap());
        let csrf = csrf_field(&form.text().await.unwrap());
        let res = client
            .post(app.url("/console/sign-in"))
            .header(COOKIE, pre)
            .form(&[("csrf", csrf.as_str()), ("token", ADMIN_TOKEN)])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 303);
        assert_eq!(res.headers()[LOCATION], "/console/");
        let cookie = cookie_pair(&set_cookie(&res, "tollgate_console").unwrap());
        Operator {
            client,
            base: app.base.clone(),
            cookie,
        }
    }

    async fn get(&self, path: &str) -> Response {
        self.client
            .get(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .send()
            .await
            .unwrap()
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
        let page = self.get("/console/").await;
        assert_eq!(page.status(), 200);
        csrf_field(&page.text().await.unwrap())
    }
}
