//! Signing up, signing in and signing out of the portal (SPEC §12).
//!
//! The forms call the account API's own handlers, [`signup`] and [`login`], so the
//! same email and password rules, the same per-address signup limit and the same
//! failed-login limit apply; a refusal shows the form again with the API's message and
//! status. Signing up opens a session at once and shows the account's first API key,
//! this once.

use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{Duration, Utc};
use maud::html;
use serde::Deserialize;

use super::page::{PortalProblem, ok, shell};
use super::session::{COOKIE_NAME, Customer, FORM_COOKIE, PATH, SIGN_IN, portal_cookie};
use crate::accounts::credentials::{self, log_in};
use crate::auth::session::{account_of, close, create};
use crate::error::ApiError;
use crate::state::AppState;
use crate::web::client::ClientIp;
use crate::web::page::html_response;
use crate::web::session::{cookie, form_token, form_token_matches, secure};

/// The sign-in and sign-up form (no `Debug`: it holds the password).
#[derive(Deserialize)]
pub struct Credentials {
    csrf: Option<String>,
    email: Option<String>,
    password: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct CsrfOnly {
    pub csrf: Option<String>,
}

/// Which of the two forms.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    SignIn,
    SignUp,
}

/// The sign-in page; a customer already signed in goes to the overview.
pub async fn sign_in_page(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, PortalProblem> {
    signed_in_or(&state, &headers, Kind::SignIn).await
}

/// The sign-up page; a customer already signed in goes to the overview.
pub async fn sign_up_page(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, PortalProblem> {
    signed_in_or(&state, &headers, Kind::SignUp).await
}

async fn signed_in_or(
    state: &AppState,
    headers: &HeaderMap,
    kind: Kind,
) -> Result<Response, PortalProblem> {
    if let Some(candidate) = cookie(headers, COOKIE_NAME)
        && account_of(&state.db, candidate).await?.is_some()
    {
        return Ok(Redirect::to("/portal/").into_response());
    }
    Ok(form(state, kind, StatusCode::OK, None))
}

/// The form, with a fresh token bound to its cookie, and `error` when the last try
/// failed.
fn form(state: &AppState, kind: Kind, status: StatusCode, error: Option<&str>) -> Response {
    let (cookie, csrf) = form_token(PATH, FORM_COOKIE, secure(state));
    let (title, action, other, other_text) = match kind {
        Kind::SignIn => (
            "Sign in",
            "/portal/sign-in",
            "/portal/sign-up",
            "No account yet? Sign up",
        ),
        Kind::SignUp => (
            "Sign up",
            "/portal/sign-up",
            SIGN_IN,
            "Have an account? Sign in",
        ),
    };
    let autocomplete = if kind == Kind::SignIn {
        "current-password"
    } else {
        "new-password"
    };
    let content = html! {
        section.signin {
            h1 { (title) }
            @if let Some(error) = error {
                p.flash.error role="alert" { (error) }
            }
            form method="post" action=(action) {
                input type="hidden" name="csrf" value=(csrf);
                label for="email" { "Email" }
                input #email type="email" name="email" autocomplete="email" maxlength="254" required autofocus;
                label for="password" { "Password" }
                input #password type="password" name="password" autocomplete=(autocomplete) minlength="8" maxlength="1024" required;
                button type="submit" { (title) }
            }
            p.hint { a href=(other) { (other_text) } }
        }
    };
    let mut response = html_response(status, shell(title, None, content));
    response.headers_mut().append(SET_COOKIE, cookie);
    response
}

/// The form's fields, once its token matches its cookie.
fn checked(
    headers: &HeaderMap,
    form_data: Result<Form<Credentials>, FormRejection>,
) -> Result<(String, String), PortalProblem> {
    let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
    if !form_token_matches(headers, FORM_COOKIE, form_data.csrf.as_deref()) {
        return Err(PortalProblem::forged());
    }
    Ok((
        form_data.email.unwrap_or_default(),
        form_data.password.unwrap_or_default(),
    ))
}

/// A refusal of the account API, shown on the form again (a server error stays one).
fn refused(state: &AppState, kind: Kind, err: ApiError) -> Result<Response, PortalProblem> {
    let (status, _) = err.status_and_code();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        let back = match kind {
            Kind::SignIn => SIGN_IN,
            Kind::SignUp => "/portal/sign-up",
        };
        return Err(PortalProblem::from(err).back_to(back, None));
    }
    Ok(form(state, kind, status, Some(&err.public_message())))
}

/// The answer that opens a session: the cookie, and the form's cookie dropped.
fn with_session(state: &AppState, mut response: Response, token: &str, ttl: Duration) -> Response {
    let headers = response.headers_mut();
    headers.append(SET_COOKIE, portal_cookie(state, COOKIE_NAME, token, ttl));
    headers.append(
        SET_COOKIE,
        portal_cookie(state, FORM_COOKIE, "", Duration::zero()),
    );
    response
}

/// Signs in through `POST /account/v1/login`'s handler; the overview, or the form again.
pub async fn sign_in(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    form_data: Result<Form<Credentials>, FormRejection>,
) -> Result<Response, PortalProblem> {
    let (email, password) = checked(&headers, form_data)?;
    let ttl_seconds = i64::try_from(state.config.account.session_ttl_seconds).unwrap_or(i64::MAX);
    let now = Utc::now();
    let answer = match log_in(&state.credentials(), &email, password, ip, now, ttl_seconds).await {
        Ok(answer) => answer,
        Err(ApiError::InvalidCredentials) => {
            return Ok(form(
                &state,
                Kind::SignIn,
                StatusCode::UNAUTHORIZED,
                Some("No account has this email and password."),
            ));
        }
        Err(e) => return refused(&state, Kind::SignIn, e),
    };
    let (token, expires_at) = answer;
    let response = Redirect::to("/portal/").into_response();
    Ok(with_session(
        &state,
        response,
        &token.reveal(),
        expires_at - now,
    ))
}

/// Signs up through `POST /account/v1/signup`'s handler, opens a session, and shows the
/// first API key once.
pub async fn sign_up(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    form_data: Result<Form<Credentials>, FormRejection>,
) -> Result<Response, PortalProblem> {
    let (email, password) = checked(&headers, form_data)?;
    let created = match credentials::sign_up(
        &state.credentials(),
        &email,
        password,
        ip,
        Utc::now(),
        state.config.usage.free_monthly_calls,
        state.metering(),
    )
    .await
    {
        Ok(created) => created,
        Err(e) => return refused(&state, Kind::SignUp, e),
    };
    let ttl = i64::try_from(state.config.account.session_ttl_seconds).unwrap_or(i64::MAX);
    let (token, expires_at) = create(&state.db, created.account_id, ttl, Utc::now()).await?;
    let content = html! {
        section.created {
            h1 { "Welcome" }
            p { "Your account is ready. This is its first API key; it is shown only now, so keep it somewhere safe:" }
            pre.secret data-key-id=(created.key_id) { code { (created.api_key.reveal()) } }
            p { a href="/portal/" { "Go to your overview" } }
        }
    };
    let response = ok(shell("Welcome", None, content));
    Ok(with_session(
        &state,
        response,
        &token.reveal(),
        expires_at - Utc::now(),
    ))
}

/// Ends the session everywhere and drops its cookie.
pub async fn sign_out(
    State(state): State<AppState>,
    customer: Customer,
    form_data: Result<Form<CsrfOnly>, FormRejection>,
) -> Result<Response, PortalProblem> {
    let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
    customer.check_csrf(form_data.csrf.as_deref())?;
    close(&state.db, customer.token()).await?;
    let mut response = Redirect::to(SIGN_IN).into_response();
    response.headers_mut().append(
        SET_COOKIE,
        portal_cookie(&state, COOKIE_NAME, "", Duration::zero()),
    );
    Ok(response)
}
