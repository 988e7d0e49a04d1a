//! Portal sessions (SPEC §12): the account's login session (`tgs_…`, the token
//! `POST /account/v1/login` hands out) carried in an `HttpOnly; SameSite=Strict;
//! Path=/portal` cookie (`Secure` under TLS). Signing in through the portal is the same
//! login, so the same session table, expiry and purge apply, and signing out deletes
//! the row.
//!
//! Every form that changes something carries the session's CSRF token, derived from
//! the session token as the console derives its own ([`csrf_of`]); the sign-in and
//! sign-up forms, sent before a session exists, are bound to a short-lived cookie of
//! their own.

use axum::extract::FromRequestParts;
use axum::http::header::SET_COOKIE;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Duration;

use super::page::PortalProblem;
use crate::auth::session::account_of;
use crate::state::AppState;
use crate::web::session::{cookie, csrf_of, same, secure, set_cookie_under};

/// Where portal cookies live.
pub const PATH: &str = "/portal";
/// The session cookie.
pub const COOKIE_NAME: &str = "tollgate_portal";
/// The sign-in and sign-up forms' cookie, until a session exists.
pub const FORM_COOKIE: &str = "tollgate_portal_form";
/// Where a customer without a session is sent.
pub const SIGN_IN: &str = "/portal/sign-in";

/// A signed-in customer: the account of the session found by the cookie (no `Debug`:
/// it holds the session token).
pub struct Customer {
    pub account_id: i64,
    token: String,
    csrf: String,
}

impl Customer {
    /// The token this session's forms carry.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Refuses a form without this session's token (`403`, before anything changes).
    pub fn check_csrf(&self, given: Option<&str>) -> Result<(), PortalProblem> {
        match given {
            Some(given) if same(given.as_bytes(), self.csrf.as_bytes()) => Ok(()),
            _ => Err(PortalProblem::forged()),
        }
    }

    /// The session token, to end the session.
    pub fn token(&self) -> &str {
        &self.token
    }
}

/// A `Set-Cookie` of the portal; `max_age` 0 deletes it.
pub fn portal_cookie(
    state: &AppState,
    name: &str,
    value: &str,
    max_age: Duration,
) -> axum::http::HeaderValue {
    set_cookie_under(PATH, name, value, max_age, secure(state))
}

impl FromRequestParts<AppState> for Customer {
    type Rejection = Response;

    /// No session, or an expired or closed one: `303` to the sign-in page.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let Some(candidate) = cookie(&parts.headers, COOKIE_NAME) else {
            return Err(Redirect::to(SIGN_IN).into_response());
        };
        match account_of(&state.db, candidate).await {
            Ok(Some(account_id)) => Ok(Customer {
                account_id,
                csrf: csrf_of(candidate),
                token: candidate.to_owned(),
            }),
            Ok(None) => {
                let mut response = Redirect::to(SIGN_IN).into_response();
                response.headers_mut().append(
                    SET_COOKIE,
                    portal_cookie(state, COOKIE_NAME, "", Duration::zero()),
                );
                Err(response)
            }
            Err(e) => Err(PortalProblem::from(e).into_response()),
        }
    }
}
