//! Signing in with the admin token, and signing out.
//!
//! Failed sign-ins count with the admin API's failed bearer tokens, per client address and
//! fleet-wide (`admin.failures_per_hour`): past the limit, sign-in is refused with `429`
//! and `Retry-After` even with the right token. The count is per address only, so that
//! nobody can lock every operator out by failing on purpose; the token itself is a long
//! random secret.

use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{Duration, Utc};
use maud::html;
use serde::Deserialize;

use super::page::{Problem, html_response, shell};
use super::session::{
    COOKIE_NAME, ConsoleSession, LIFETIME, SIGN_IN_COOKIE, cookie, find, open, secure, set_cookie,
    sign_in_token, sign_in_token_matches,
};
use crate::auth::admin::admin_token_matches;
use crate::error::ApiError;
use crate::state::AppState;
use crate::web::client::ClientIp;

#[derive(Debug, Deserialize)]
pub struct SignInForm {
    csrf: Option<String>,
    token: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct SignOutForm {
    csrf: Option<String>,
}

/// The sign-in page; an operator already signed in goes to the overview.
pub async fn page(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, Problem> {
    if let Some(candidate) = cookie(&headers, COOKIE_NAME)
        && find(&state.db, candidate, false).await?.is_some()
    {
        return Ok(Redirect::to("/console/").into_response());
    }
    Ok(form(&state, StatusCode::OK, None))
}

/// The sign-in form, with a fresh token bound to its cookie, and `error` when the last
/// try failed.
fn form(state: &AppState, status: StatusCode, error: Option<&str>) -> Response {
    let (cookie, csrf) = sign_in_token(secure(state));
    let content = html! {
        section.signin {
            h1 { "Sign in" }
            p.hint { "Operators sign in with the gateway's admin token (" code { "admin.token" } ")." }
            @if let Some(error) = error {
                p.flash.error role="alert" { (error) }
            }
            form method="post" action="/console/sign-in" {
                input type="hidden" name="csrf" value=(csrf);
                label for="token" { "Admin token" }
                input #token type="password" name="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Sign in" }
            }
        }
    };
    let mut response = html_response(status, shell("Sign in", None, content));
    response.headers_mut().append(SET_COOKIE, cookie);
    response
}

/// Checks the form's token and the admin token; opens a session and goes to the
/// overview, or shows the form again.
pub async fn sign_in(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    form_data: Result<Form<SignInForm>, FormRejection>,
) -> Result<Response, Problem> {
    let Form(form_data) = form_data.map_err(|e| Problem::bad_form(&e))?;
    if !sign_in_token_matches(&headers, form_data.csrf.as_deref()) {
        return Err(Problem::forged());
    }
    let Some(expected) = &state.config.admin.token else {
        return Err(Problem::not_found());
    };
    // Failures count per address only, shared with the admin API's bearer token: a
    // global count would let anyone lock every operator out.
    let now = Utc::now();
    let back = |e: ApiError| Problem::from(e).back_to(super::session::SIGN_IN, None);
    state.limits.admin_allowed(ip, now).await.map_err(back)?;
    let given = form_data.token.unwrap_or_default();
    if !admin_token_matches(expected, given.trim()) {
        state.limits.admin_failed(ip, now).await.map_err(back)?;
        tracing::warn!("console sign-in with a wrong admin token");
        return Ok(form(
            &state,
            StatusCode::UNAUTHORIZED,
            Some("That is not the admin token."),
        ));
    }
    let token = open(&state.db, now).await?;
    tracing::info!("console session opened");
    let secure = secure(&state);
    let mut response = Redirect::to("/console/").into_response();
    let headers = response.headers_mut();
    headers.append(
        SET_COOKIE,
        set_cookie(COOKIE_NAME, &token.reveal(), LIFETIME, secure),
    );
    headers.append(
        SET_COOKIE,
        set_cookie(SIGN_IN_COOKIE, "", Duration::zero(), secure),
    );
    Ok(response)
}

/// Ends the session everywhere and drops its cookie.
pub async fn sign_out(
    State(state): State<AppState>,
    session: ConsoleSession,
    form_data: Result<Form<SignOutForm>, FormRejection>,
) -> Result<Response, Problem> {
    let Form(form_data) = form_data.map_err(|e| Problem::bad_form(&e))?;
    session.check_csrf(form_data.csrf.as_deref())?;
    session.close(&state.db).await?;
    tracing::info!("console session closed");
    let mut response = Redirect::to(super::session::SIGN_IN).into_response();
    response.headers_mut().append(
        SET_COOKIE,
        set_cookie(COOKIE_NAME, "", Duration::zero(), secure(&state)),
    );
    Ok(response)
}
