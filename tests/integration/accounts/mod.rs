//! The account API (signup, login, keys, sessions), the admin API's access rules, and
//! the operational endpoints.

mod admin;
mod caching;
mod edges;
mod keys;
mod limits;
mod methods;
mod noise;
mod ops;
mod refusals;
mod sessions;
mod signup;

use reqwest::Method;

use crate::common::TestApp;

/// One request on the account API with a login session.
async fn with_session(app: &TestApp, method: Method, path: &str, token: &str) -> reqwest::Response {
    app.client
        .request(method, app.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}
