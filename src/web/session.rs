//! What the page faces share of sessions: cookies set `HttpOnly; SameSite=Strict` under
//! the face's path (`Secure` under TLS), and CSRF tokens. A session's CSRF token is the
//! SHA-256 of its secret under a label of its own, so only a holder of the cookie can
//! compute it and it needs no storage; a form sent before any session exists is bound the
//! same way to a short-lived cookie of its own (a double-submitted token). Tokens are
//! compared in constant time.

use axum::http::header::COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use chrono::Duration;
use sha2::{Digest, Sha256};

use crate::auth::token::PlainToken;
use crate::state::AppState;

/// The prefix of a form cookie's random secret.
const FORM_PREFIX: &str = "tgc_";
/// How long a form sent before any session exists stays good.
const FORM_LIFETIME: Duration = Duration::hours(1);

/// The CSRF token of the session (or sign-in form) whose secret is `secret`.
pub fn csrf_of(secret: &str) -> String {
    let mut digest = Sha256::new();
    digest.update(b"tollgate console csrf\0");
    digest.update(secret.as_bytes());
    hex::encode(digest.finalize())
}

/// Equal byte strings, in a time that depends only on their lengths.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(k, v)| (k == name).then_some(v))
}

/// A `Set-Cookie` value under `path` (`/console`, `/portal`), readable by no script and
/// sent on no cross-site request; `max_age` 0 deletes it.
pub fn set_cookie_under(
    path: &str,
    name: &str,
    value: &str,
    max_age: Duration,
    secure: bool,
) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        max_age.num_seconds()
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A fresh token for a form sent before any session exists, bound to cookie `name`
/// under `path`: the cookie, and the token the form carries.
pub fn form_token(path: &str, name: &str, secure: bool) -> (HeaderValue, String) {
    let secret = PlainToken::generate(FORM_PREFIX).reveal();
    let csrf = csrf_of(&secret);
    (
        set_cookie_under(path, name, &secret, FORM_LIFETIME, secure),
        csrf,
    )
}

/// Whether a form's token matches the cookie `name` of [`form_token`].
pub fn form_token_matches(headers: &HeaderMap, name: &str, given: Option<&str>) -> bool {
    match (cookie(headers, name), given) {
        (Some(secret), Some(given)) => same(csrf_of(secret).as_bytes(), given.as_bytes()),
        _ => false,
    }
}

/// Whether session cookies need `Secure`: the public listener speaks TLS.
pub fn secure(state: &AppState) -> bool {
    state.config.server.tls_cert.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_static("a=1; tollgate_console=tgc_x"),
        );
        headers.append(COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&headers, "tollgate_console"), Some("tgc_x"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, "tollgate"), None);
    }
}
