//! A known route asked with a method it does not take answers `405 METHOD_NOT_ALLOWED`
//! with an `Allow` header listing the methods it takes (SPEC §3.1); a 404 never carries
//! `Allow`.

use reqwest::Method;
use secrecy::SecretString;

use crate::common::*;

/// Each route's path with a method it refuses, and the methods `Allow` must list (a route
/// that later takes more methods lists those too).
const REFUSED: &[(&str, &str, &[&str])] = &[
    ("PUT", "/account/v1/signup", &["POST"]),
    ("GET", "/account/v1/login", &["POST"]),
    ("DELETE", "/account/v1/usage", &["GET", "HEAD"]),
    ("PATCH", "/account/v1/keys", &["GET", "HEAD", "POST"]),
    ("GET", "/account/v1/keys/1", &["DELETE"]),
    ("OPTIONS", "/account/v1/plans", &["GET", "HEAD"]),
    ("TRACE", "/account/v1/redeem", &["POST"]),
    ("GET", "/admin/v1/accounts/1/subscriptions", &["POST"]),
    ("POST", "/admin/v1/accounts", &["GET", "HEAD"]),
    ("PUT", "/admin/v1/accounts/1/usage", &["GET", "HEAD"]),
    (
        "DELETE",
        "/admin/v1/accounts/1/usage/daily",
        &["GET", "HEAD"],
    ),
    ("GET", "/admin/v1/accounts/1/grants", &["POST"]),
    ("GET", "/admin/v1/reconcile", &["POST"]),
    ("GET", "/admin/v1/reload", &["POST"]),
    ("PATCH", "/admin/v1/codes", &["POST"]),
    ("POST", "/healthz", &["GET", "HEAD"]),
    ("DELETE", "/readyz", &["GET", "HEAD"]),
    ("PUT", "/openapi.json", &["GET", "HEAD"]),
    ("GET", "/billing/v1/stripe", &["POST"]),
    ("PUT", "/console/accounts", &["GET", "HEAD"]),
    ("GET", "/console/sign-out", &["POST"]),
];

fn allowed(res: &reqwest::Response) -> Vec<String> {
    res.headers()
        .get_all("allow")
        .iter()
        .flat_map(|v| v.to_str().unwrap().split(','))
        .map(|m| m.trim().to_owned())
        .collect()
}

#[tokio::test]
async fn a_known_route_with_another_method_answers_405_listing_its_methods() {
    let app = spawn_app_with(|c| {
        c.billing.stripe_webhook_secret = Some(SecretString::from("whsec_methods"));
    })
    .await;
    for &(method, path, expected) in REFUSED {
        let res = app
            .client
            .request(method.parse().unwrap(), app.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        let allowed = allowed(&res);
        assert!(
            expected.iter().all(|m| allowed.iter().any(|a| a == m))
                && !allowed.iter().any(|a| a == method),
            "{method} {path}: Allow {allowed:?}, expected {expected:?}"
        );
        assert_error(res, 405, "METHOD_NOT_ALLOWED").await;
    }
}

#[tokio::test]
async fn a_404_never_carries_allow() {
    let app = spawn_app().await;
    for (method, path) in [
        (Method::GET, "/nowhere"),
        (Method::PUT, "/account/v1/nothing"),
        (Method::OPTIONS, "/admin/v1/accounts/1"),
        (Method::PUT, "/console/no-such-page"),
        (Method::DELETE, "/billing/v1/stripe"),
    ] {
        let res = app
            .client
            .request(method.clone(), app.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert!(res.headers().get("allow").is_none(), "{method} {path}");
        assert_eq!(res.status(), 404, "{method} {path}");
    }
}
