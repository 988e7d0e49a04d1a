//! The keys page (SPEC §12, §13, §15): every key of the account with its name, prefix,
//! scopes, creation, expiry, last use, revocation, units used this month, monthly limit
//! and rate limit; forms to create a key (with a name, an expiry and scopes; shown once,
//! on the page the form answers with), roll one (the new key shown once, the old one's
//! end beside it), revoke one, and set or clear its limit. Each goes through the
//! function the account API's handler uses, with the signed-in account's id: another
//! account's key id is `404`, as there. Times on the page, and the expiry the form
//! takes, are UTC.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use maud::{Markup, html};

use super::key_fields::{
    HOUR, LimitForm, NewKeyForm, RollForm, expiry_of, grace_of, limit_of, name_of, scopes_of,
};
use super::overview::Done;
use super::page::{Frame, PortalProblem, Section, notice, shell};
use super::plans::rate_in_words;
use super::session::Customer;
use crate::accounts::keys::{
    DEFAULT_GRACE_SECONDS, DEFAULT_KEY_NAME, KeyCreated, KeyRoll, KeyRolled, KeySettings,
    KeySummary, MAX_GRACE_SECONDS, MAX_KEY_NAME_CHARS, create_account_key, keys_of,
    revoke as revoke_key, roll as roll_key, set_key_limit,
};
use crate::audit::Origin;
use crate::auth::key_policy::ALL_SCOPES;
use crate::error::ApiError;
use crate::state::AppState;
use crate::web::client::ClientIp;
use crate::web::page::{csrf_field, grouped, html_response};

/// Most keys the page lists (revoked ones included).
const MAX_LISTED: i64 = 1000;

/// Where the keys page's refusals lead back to.
const KEYS_PAGE: &str = "/portal/keys";

/// A key the answering page shows once.
enum Fresh<'a> {
    Created(&'a KeyCreated),
    Rolled(&'a KeyRolled),
}

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
    fresh: Option<Fresh<'_>>,
) -> Result<Response, PortalProblem> {
    let keys = keys_of(&state.db, customer.account_id, i64::MIN, MAX_LISTED).await?;
    let now = Utc::now();
    let csrf = customer.csrf();
    let content = html! {
        h1 { "API keys" }
        p.hint { "All times are UTC." }
        @match &fresh {
            Some(Fresh::Created(created)) => {
                section.created {
                    p.flash.done role="status" { "Key created. It is shown only now; keep it somewhere safe:" }
                    pre.secret data-key-id=(created.key_id) { code { (created.api_key) } }
                }
            }
            Some(Fresh::Rolled(rolled)) => { (rolled_notice(rolled, &keys)) }
            None => {}
        }
        table #keys {
            thead { tr {
                th { "Name" } th { "Key" } th { "Scopes" } th { "Created" } th { "Expires" }
                th { "Last used" } th { "Revoked" } th.num { "Used this month" }
                th.num { "Monthly limit" } th { "Rate limit" } th { "" }
            } }
            tbody {
                @for key in &keys {
                    (key_row(key, now, csrf))
                }
            }
        }
        h2 { "New key" }
        (new_key_form(csrf))
    };
    let frame = Frame {
        section: Section::Keys,
        csrf,
        notice,
    };
    let status = if fresh.is_some() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(html_response(
        status,
        shell("API keys", Some(frame), content),
    ))
}

/// An instant as the page shows it (UTC, to the minute), machine-readable beside.
fn when(at: DateTime<Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339_opts(SecondsFormat::Secs, true)) { (at.format("%Y-%m-%d %H:%M")) } }
}

fn key_row(key: &KeySummary, now: DateTime<Utc>, csrf: &str) -> Markup {
    let expired = key.expires_at.is_some_and(|at| at <= now);
    let live = key.revoked_at.is_none() && !expired;
    html! {
        tr data-key-id=(key.key_id) {
            td.name { (key.name) }
            td { code { (key.prefix) "…" } }
            td.scopes { @for (i, scope) in key.scopes.iter().enumerate() {
                @if i > 0 { br; }
                code { (scope) }
            } }
            td { (when(key.created_at)) }
            td.expires {
                @match key.expires_at { Some(at) => (when(at)), None => "never" }
                @if expired && key.revoked_at.is_none() { " " span.badge.exhausted { "expired" } }
            }
            td.last-used { @match key.last_used_at { Some(at) => (when(at)), None => "never" } }
            td { @if let Some(at) = key.revoked_at { (when(at)) } @else { "—" } }
            td.num data-used=(key.used) { (grouped(key.used)) }
            td.num data-limit=[key.monthly_limit] {
                @match key.monthly_limit { Some(n) => (grouped(n)), None => "none" }
                @if key.revoked_at.is_none() && key.monthly_limit.is_some_and(|n| key.used >= n) {
                    " " span.badge.exhausted.used-up { "used up" }
                }
            }
            td.rate-limit { @match &key.rate_limit { Some(r) => (rate_in_words(r)), None => "none" } }
            td {
                @if key.revoked_at.is_none() {
                    (limit_form(key.key_id, key.monthly_limit, csrf))
                    (revoke_form(key.key_id, &key.prefix, csrf))
                }
                @if live {
                    (roll_form(key.key_id, &key.prefix, csrf))
                }
            }
        }
    }
}

/// The answer to a roll: the new key, once, and when the old one stops.
fn rolled_notice(rolled: &KeyRolled, keys: &[KeySummary]) -> Markup {
    let old = keys.iter().find(|k| k.key_id == rolled.replaces);
    html! {
        section.created.rolled {
            p.flash.done role="status" { "Key rolled. The new key is shown only now; keep it somewhere safe:" }
            pre.secret data-key-id=(rolled.key_id) { code { (rolled.api_key) } }
            p #old-key-end data-key-id=(rolled.replaces) {
                "The old key "
                @if let Some(old) = old { code { (old.prefix) "…" } " " }
                "is accepted until " strong { (when(rolled.old_key_expires_at)) " UTC" }
                ", then refused."
            }
        }
    }
}

fn new_key_form(csrf: &str) -> Markup {
    html! {
        form #new-key method="post" action="/portal/keys" {
            (csrf_field(csrf))
            label for="new-name" { "Name (blank for “" (DEFAULT_KEY_NAME) "”)" }
            input #new-name type="text" name="name" maxlength=(MAX_KEY_NAME_CHARS) placeholder=(DEFAULT_KEY_NAME);
            label for="new-expires" { "Expires, in UTC (blank for never)" }
            input #new-expires type="text" name="expires_at" placeholder="YYYY-MM-DD HH:MM" autocomplete="off";
            fieldset #new-scopes {
                legend { "Scopes: what the key may call (nothing ticked or written: both APIs)" }
                label { input type="checkbox" name="scope_vedic" value=(ALL_SCOPES[0]); " " code { (ALL_SCOPES[0]) } }
                label { input type="checkbox" name="scope_western" value=(ALL_SCOPES[1]); " " code { (ALL_SCOPES[1]) } }
                label for="new-paths" { "Or narrower paths, separated by commas or new lines (like /western/v1/synastry/)" }
                textarea #new-paths name="scope_paths" rows="2" {}
            }
            label for="new-limit" { "Monthly limit (units, blank for none)" }
            input #new-limit type="number" name="monthly_limit" min="0" inputmode="numeric";
            button type="submit" { "Create key" }
        }
    }
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

/// Rolling asks first too: it ends the old key once its grace is over.
fn roll_form(key_id: i64, prefix: &str, csrf: &str) -> Markup {
    let field = format!("grace-{key_id}");
    html! {
        details.confirm.roll {
            summary { "Roll…" }
            form.inline method="post" action=(format!("/portal/keys/{key_id}/roll")) {
                (csrf_field(csrf))
                p { "A new key with this one's name, scopes and limits, shown once; "
                    code { (prefix) "…" } " is still accepted for the grace hours, then refused." }
                label for=(field) { "Grace (hours, 0 to " (MAX_GRACE_SECONDS / HOUR) ")" }
                input id=(field) type="number" name="grace_hours" min="0" max=(MAX_GRACE_SECONDS / HOUR)
                    step="1" inputmode="numeric" value=(DEFAULT_GRACE_SECONDS / HOUR);
                button type="submit" { "Roll this key" }
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

/// Creates a key with the form's name, expiry, scopes and limit, and shows it once.
pub async fn create(
    State(state): State<AppState>,
    customer: Customer,
    ClientIp(ip): ClientIp,
    form_data: Result<Form<NewKeyForm>, FormRejection>,
) -> Result<Response, PortalProblem> {
    let created = async {
        let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
        customer.check_csrf(form_data.csrf.as_deref())?;
        let settings = KeySettings {
            name: name_of(form_data.name.as_deref())?,
            expires_at: expiry_of(form_data.expires_at.as_deref(), Utc::now())?,
            scopes: scopes_of(&form_data)?,
            monthly_limit: limit_of(form_data.monthly_limit.as_deref())?,
            rate_limit: None,
        };
        Ok::<_, PortalProblem>(
            create_account_key(
                &state.db,
                customer.account_id,
                state.config.account.max_keys,
                &settings,
                Origin::account(ip),
            )
            .await?,
        )
    }
    .await
    .map_err(|p| p.back_to(KEYS_PAGE, Some(customer.csrf())))?;
    render(&state, &customer, None, Some(Fresh::Created(&created))).await
}

/// Rolls one of the account's keys and shows the new one once, with the old one's end.
pub async fn roll(
    State(state): State<AppState>,
    customer: Customer,
    ClientIp(ip): ClientIp,
    Path(key_id): Path<String>,
    form_data: Result<Form<RollForm>, FormRejection>,
) -> Result<Response, PortalProblem> {
    let rolled = async {
        let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
        customer.check_csrf(form_data.csrf.as_deref())?;
        let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
        let roll = KeyRoll {
            key_id,
            grace_seconds: grace_of(form_data.grace_hours.as_deref())?,
        };
        Ok::<_, PortalProblem>(
            roll_key(
                &state.db,
                &state.keys,
                customer.account_id,
                roll,
                state.config.account.max_keys,
                Origin::account(ip),
                Utc::now(),
            )
            .await?,
        )
    }
    .await
    .map_err(|p| p.back_to(KEYS_PAGE, Some(customer.csrf())))?;
    render(&state, &customer, None, Some(Fresh::Rolled(&rolled))).await
}

/// Revokes one of the account's keys.
pub async fn revoke(
    State(state): State<AppState>,
    customer: Customer,
    ClientIp(ip): ClientIp,
    Path(key_id): Path<String>,
    form_data: Result<Form<LimitForm>, FormRejection>,
) -> Result<Response, PortalProblem> {
    async {
        let Form(form_data) = form_data.map_err(|e| PortalProblem::bad_form(&e))?;
        customer.check_csrf(form_data.csrf.as_deref())?;
        let key_id: i64 = key_id.parse().map_err(|_| ApiError::KeyNotFound)?;
        let origin = Origin::account(ip);
        revoke_key(&state.db, &state.keys, customer.account_id, key_id, origin).await?;
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
    ClientIp(ip): ClientIp,
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
            &state.keys,
            &state.key_limits,
            customer.account_id,
            key_id,
            limit,
            Origin::account(ip),
        )
        .await?;
        Ok::<_, PortalProblem>(())
    }
    .await
    .map_err(|p| p.back_to(KEYS_PAGE, Some(customer.csrf())))?;
    Ok(Redirect::to("/portal/keys?done=limit").into_response())
}
