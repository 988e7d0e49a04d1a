//! The keys page (SPEC §12, §13): every key of the account with its prefix, creation,
//! revocation, units used this month and monthly limit; forms to create a key (shown
//! once, on the page the form answers with), revoke one, and set or clear its limit.
//! Each goes through the function the account API's handler uses, with the signed-in
//! account's id: another account's key id is `404`, as there.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::overview::Done;
use super::page::{Frame, PortalProblem, Section, notice, shell};
use super::session::Customer;
use crate::accounts::keys::{
    KeyCreated, MAX_KEY_LIMIT, checked_limit, create_account_key, keys_of, revoke as revoke_key,
    set_key_limit,
};
use crate::error::ApiError;
use crate::state::AppState;
use crate::web::page::{csrf_field, grouped, html_response};

/// Most keys the page lists (revoked ones included).
const MAX_LISTED: i64 = 1000;

/// The create and limit forms: the token and an optional limit (blank = none).
#[derive(Debug, Deserialize)]
pub struct LimitForm {
    csrf: Option<String>,
    monthly_limit: Option<String>,
}

/// A limit field: blank is none; else a whole number from 0 to the API's bound, told in
/// the form's words.
fn limit_of(field: Option<&str>) -> Result<Option<i64>, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(None);
    }
    let refused = || {
        PortalProblem::from(ApiError::Validation(format!(
            "Monthly limit must be a whole number of units from 0 to {}, or blank for none.",
            grouped(MAX_KEY_LIMIT)
        )))
    };
    let n = text.parse::<i64>().map_err(|_| refused())?;
    checked_limit(Some(n)).map_err(|_| refused())
}

/// Where the keys page's refusals lead back to.
const KEYS_PAGE: &str = "/portal/keys";

/// The keys page.
pub async fn page(
    State(state): State<AppState>,
    customer: Customer,
    Query(done): Query<Done>,
) -> Result<Response, PortalProblem> {
    render(&state, &customer, notice(done.done.as_deref()), None).await
}

async fn render(
    state: &AppState,
    customer: &Customer,
    notice: Option<&str>,
    created: Option<&KeyCreated>,
) -> Result<Response, PortalProblem> {
    let keys = keys_of(&state.db, customer.account_id, i64::MIN, MAX_LISTED).await?;
    let csrf = customer.csrf();
    let content = html! {
        h1 { "API keys" }
        @if let Some(created) = created {
            section.created {
                p.flash.done role="status" { "Key created. It is shown only now; keep it somewhere safe:" }
                pre.secret data-key-id=(created.key_id) { code { (created.api_key) } }
            }
        }
        table #keys {
            thead { tr {
                th { "Key" } th { "Created" } th { "Revoked" }
                th.num { "Used this month" } th.num { "Monthly limit" } th { "" }
            } }
            tbody {
                @for key in &keys {
                    tr data-key-id=(key.key_id) {
                        td { code { (key.prefix) "…" } }
                        td { (key.created_at.format("%Y-%m-%d %H:%M")) }
                        td { @if let Some(at) = key.revoked_at { (at.format("%Y-%m-%d %H:%M")) } @else { "—" } }
                        td.num data-used=(key.used) { (grouped(key.used)) }
                        td.num data-limit=[key.monthly_limit] {
                            @match key.monthly_limit { Some(n) => (grouped(n)), None => "none" }
                            @if key.revoked_at.is_none() && key.monthly_limit.is_some_and(|n| key.used >= n) {
                                " " span.badge.exhausted.used-up { "used up" }
                            }
                        }
                        td {
                            @if key.revoked_at.is_none() {
                                (limit_form(key.key_id, key.monthly_limit, csrf))
                                (revoke_form(key.key_id, &key.prefix, csrf))
                            }
                        }
                    }
                }
            }
        }
        h2 { "New key" }
        form #new-key method="post" action="/portal/keys" {
            (csrf_field(csrf))
            label for="new-limit" { "Monthly limit (units, blank for none)" }
            input #new-limit type="number" name="monthly_limit" min="0" inputmode="numeric";
            button type="submit" { "Create key" }
        }
    };
    let frame = Frame {
        section: Section::Keys,
        csrf,
        notice,
    };
    let status = if created.is_some() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(html_response(
        status,
        shell("API keys", Some(frame), content),
    ))
}

/// Revoking asks first, without a script: the button that revokes is behind a
/// disclosure that says what it does, and is styled as the dangerous action it is.
fn revoke_form(key_id: i64, prefix: &str, csrf: &str) -> Markup {
    html! {
        details.confirm {
            summary { "Revoke…" }
            form.inline method="post" action=(format!("/portal/keys/{key_id}/revoke")) {
                (csrf_field(csrf))
                p { "Calls with " code { (prefix) "…" } " are refused from then on; this cannot be undone." }
                button.danger type="submit" { "Revoke this key" }
            }
        }
    }
}

fn limit_form(key_id: i64, limit: Option<i64>, csrf: &str) -> Markup {
    html! {
        form.inline method="post" action=(format!("/portal/keys/{key_id}/limit")) {
            (csrf_field(csrf))
            input type="number" name="monthly_limit" min="0" value=[limit] aria-label="Monthly limit";
            button type="submit" { "Set limit" }
        }
    }
}

/// Creates a key (with its limit, if given) and shows it once.
pub async fn create(
    State(state): State<AppState>,
    customer: Customer,
    form_data: Result<Form<LimitForm>, FormRejection>,
) -> Result<Response, PortalProblem> {
    let created = async {
        let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
        customer.check_csrf(form_data.csrf.as_deref())?;
        let limit = limit_of(form_data.monthly_limit.as_deref())?;
        Ok::<_, PortalProblem>(
            create_account_key(
                &state.db,
                customer.account_id,
                state.config.account.max_keys,
                limit,
            )
            .await?,
        )
    }
    .await
    .map_err(|p| p.back_to(KEYS_PAGE, Some(customer.csrf())))?;
    render(&state, &customer, None, Some(&created)).await
}

/// Revokes one of the account's keys.
pub async fn revoke(
    State(state): State<AppState>,
    customer: Customer,
    Path(key_id): Path<String>,
    form_data: Result<Form<LimitForm>, FormRejection>,
) -> Result<Response, PortalProblem> {
    async {
        let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
        customer.check_csrf(form_data.csrf.as_deref())?;
        let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
        revoke_key(&state.db, &state.keys, customer.account_id, key_id).await?;
        Ok::<_, PortalProblem>(())
    }
    .await
    .map_err(|p| p.back_to(KEYS_PAGE, Some(customer.csrf())))?;
    Ok(Redirect::to("/portal/keys?done=revoked").into_response())
}

/// Sets (or, blank, clears) the monthly limit of one of the account's keys.
pub async fn set_limit(
    State(state): State<AppState>,
    customer: Customer,
    Path(key_id): Path<String>,
    form_data: Result<Form<LimitForm>, FormRejection>,
) -> Result<Response, PortalProblem> {
    async {
        let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
        customer.check_csrf(form_data.csrf.as_deref())?;
        let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
        let limit = limit_of(form_data.monthly_limit.as_deref())?;
        set_key_limit(
            &state.db,
            &state.key_limits,
            customer.account_id,
            key_id,
            limit,
        )
        .await?;
        Ok::<_, PortalProblem>(())
    }
    .await
    .map_err(|p| p.back_to(KEYS_PAGE, Some(customer.csrf())))?;
    Ok(Redirect::to("/portal/keys?done=limit").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blank_limit_is_none_and_others_are_checked() {
        assert_eq!(limit_of(None).unwrap(), None);
        assert_eq!(limit_of(Some("  ")).unwrap(), None);
        assert_eq!(limit_of(Some(" 25 ")).unwrap(), Some(25));
        assert!(limit_of(Some("-1")).is_err());
        assert!(limit_of(Some("1.5")).is_err());
        assert!(limit_of(Some("x")).is_err());
        let Err(PortalProblem(problem)) = limit_of(Some("-1")) else {
            panic!("refused");
        };
        assert!(
            problem.message.starts_with("Monthly limit must be"),
            "{}",
            problem.message
        );
    }
}
