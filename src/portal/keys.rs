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
use serde::Deserialize;

use super::overview::Done;
use super::page::{Frame, PortalProblem, Section, notice, shell};
use super::plans::rate_in_words;
use super::session::Customer;
use crate::accounts::keys::{
    DEFAULT_GRACE_SECONDS, DEFAULT_KEY_NAME, KeyCreated, KeyRoll, KeyRolled, KeySettings,
    KeySummary, MAX_GRACE_SECONDS, MAX_KEY_LIMIT, MAX_KEY_NAME_CHARS, MAX_SCOPE_BYTES, MAX_SCOPES,
    checked_expiry, checked_limit, checked_name, checked_scopes, create_account_key, keys_of,
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

/// Seconds in an hour: the roll form takes its grace in hours.
const HOUR: i64 = 3600;

/// The limit and revoke forms: the token and an optional limit (blank = none).
#[derive(Debug, Deserialize)]
pub struct LimitForm {
    csrf: Option<String>,
    monthly_limit: Option<String>,
}

/// The create form: every field text, blank meaning the API's default.
#[derive(Debug, Deserialize)]
pub struct NewKeyForm {
    csrf: Option<String>,
    name: Option<String>,
    /// A `datetime-local` value (or a day, or RFC 3339), read as UTC.
    expires_at: Option<String>,
    /// Ticked: the key may call `/vedic/v1/` (the value sent is not trusted).
    scope_vedic: Option<String>,
    /// Ticked: the key may call `/western/v1/`.
    scope_western: Option<String>,
    /// Narrower paths, separated by commas or blanks.
    scope_paths: Option<String>,
    monthly_limit: Option<String>,
}

/// The roll form: the token and the old key's grace in hours (blank = a day).
#[derive(Debug, Deserialize)]
pub struct RollForm {
    csrf: Option<String>,
    grace_hours: Option<String>,
}

/// A refusal of a form field, in the form's words (`422`).
fn refused(message: String) -> PortalProblem {
    PortalProblem::from(ApiError::Validation(message))
}

/// A limit field: blank is none; else a whole number from 0 to the API's bound, told in
/// the form's words.
fn limit_of(field: Option<&str>) -> Result<Option<i64>, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(None);
    }
    let refuse = || {
        refused(format!(
            "Monthly limit must be a whole number of units from 0 to {}, or blank for none.",
            grouped(MAX_KEY_LIMIT)
        ))
    };
    let n = text.parse::<i64>().map_err(|_| refuse())?;
    checked_limit(Some(n)).map_err(|_| refuse())
}

/// A name field: blank is [`DEFAULT_KEY_NAME`]; surrounding blanks are dropped.
fn name_of(field: Option<&str>) -> Result<String, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(DEFAULT_KEY_NAME.to_owned());
    }
    checked_name(text.to_owned()).map_err(|_| {
        refused(format!(
            "Name must be 1 to {MAX_KEY_NAME_CHARS} printable characters, or blank for \
             “{DEFAULT_KEY_NAME}”."
        ))
    })
}

/// An expiry field, in UTC: what a `datetime-local` field sends (`YYYY-MM-DDTHH:MM`,
/// seconds optional), `YYYY-MM-DD HH:MM`, a day (its midnight) or RFC 3339 with an
/// offset; blank is never. It must lie after `now`.
fn expiry_of(
    field: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(None);
    }
    let at = crate::web::params::utc_instant(text).ok_or_else(|| {
        refused(
            "Expires must be a date and time in UTC, like 2026-12-01 00:00, or blank for \
                 never."
                .into(),
        )
    })?;
    checked_expiry(Some(at), now).map_err(|_| {
        refused(
            "Expires must be in the future (UTC, before the year 10000), or blank for never."
                .into(),
        )
    })
}

/// The scope fields: the ticked APIs and the written paths; nothing at all is none
/// (every proxied path).
fn scopes_of(form: &NewKeyForm) -> Result<Option<Vec<String>>, PortalProblem> {
    let ticked = [&form.scope_vedic, &form.scope_western];
    let mut scopes: Vec<String> = ALL_SCOPES
        .iter()
        .zip(ticked)
        .filter(|(_, field)| field.is_some())
        .map(|(scope, _)| (*scope).to_owned())
        .collect();
    let written = form.scope_paths.as_deref().unwrap_or_default();
    scopes.extend(
        written
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|path| !path.is_empty())
            .map(str::to_owned),
    );
    if scopes.is_empty() {
        return Ok(None);
    }
    checked_scopes(scopes).map(Some).map_err(|_| {
        refused(format!(
            "Paths must each be /vedic/v1/ or /western/v1/ or a longer path under one of them \
             (at most {MAX_SCOPE_BYTES} characters, no query), {MAX_SCOPES} at most."
        ))
    })
}

/// A grace field, in hours: blank is a day; else a whole number up to a week.
fn grace_of(field: Option<&str>) -> Result<i64, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(DEFAULT_GRACE_SECONDS);
    }
    text.parse::<i64>()
        .ok()
        .filter(|hours| (0..=MAX_GRACE_SECONDS / HOUR).contains(hours))
        .map(|hours| hours * HOUR)
        .ok_or_else(|| {
            refused(format!(
                "Grace must be a whole number of hours from 0 to {}, or blank for {}.",
                MAX_GRACE_SECONDS / HOUR,
                DEFAULT_GRACE_SECONDS / HOUR
            ))
        })
}

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

    /// The message of a refused field.
    fn why<T: std::fmt::Debug>(result: Result<T, PortalProblem>) -> String {
        match result {
            Err(PortalProblem(problem)) => problem.message,
            Ok(value) => panic!("refused, not {value:?}"),
        }
    }

    #[test]
    fn a_blank_name_is_the_default_and_others_are_checked() {
        assert_eq!(name_of(None).unwrap(), "default");
        assert_eq!(name_of(Some("  ")).unwrap(), "default");
        assert_eq!(name_of(Some(" ci deploy ")).unwrap(), "ci deploy");
        assert!(why(name_of(Some(&"x".repeat(65)))).starts_with("Name must be"));
        assert!(why(name_of(Some("a\u{7}b"))).starts_with("Name must be"));
    }

    #[test]
    fn an_expiry_is_read_as_utc_in_the_forms_a_browser_sends_and_must_be_ahead() {
        let now: DateTime<Utc> = "2026-11-30T12:00:00Z".parse().unwrap();
        let midnight: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().unwrap();
        for text in [
            "2026-12-01T00:00",
            "2026-12-01T00:00:00",
            "2026-12-01 00:00",
            "2026-12-01",
            "2026-12-01T01:00:00+01:00",
        ] {
            assert_eq!(
                expiry_of(Some(text), now).unwrap(),
                Some(midnight),
                "{text}"
            );
        }
        assert_eq!(expiry_of(Some(" "), now).unwrap(), None);
        assert!(why(expiry_of(Some("tomorrow"), now)).contains("like 2026-12-01 00:00"));
        assert!(why(expiry_of(Some("2026-11-30T12:00"), now)).contains("in the future"));
    }

    fn scopes_form(vedic: bool, western: bool, paths: &str) -> NewKeyForm {
        NewKeyForm {
            csrf: None,
            name: None,
            expires_at: None,
            scope_vedic: vedic.then(|| "anything".to_owned()),
            scope_western: western.then(|| "/western/v1/".to_owned()),
            scope_paths: Some(paths.to_owned()),
            monthly_limit: None,
        }
    }

    #[test]
    fn scopes_are_the_ticked_apis_and_the_written_paths_and_none_means_both() {
        assert_eq!(scopes_of(&scopes_form(false, false, " \n ")).unwrap(), None);
        assert_eq!(
            scopes_of(&scopes_form(true, false, "")).unwrap(),
            Some(vec!["/vedic/v1/".to_owned()])
        );
        assert_eq!(
            scopes_of(&scopes_form(
                false,
                true,
                "/vedic/v1/panchang/,\r\n/vedic/v1/x/ "
            ))
            .unwrap(),
            Some(vec![
                "/western/v1/".to_owned(),
                "/vedic/v1/panchang/".to_owned(),
                "/vedic/v1/x/".to_owned()
            ])
        );
        assert!(why(scopes_of(&scopes_form(false, false, "/admin/v1/"))).starts_with("Paths must"));
        assert!(
            why(scopes_of(&scopes_form(true, false, "/vedic/v1/../x"))).starts_with("Paths must")
        );
    }

    #[test]
    fn grace_is_whole_hours_up_to_a_week_and_blank_is_a_day() {
        assert_eq!(grace_of(None).unwrap(), 86_400);
        assert_eq!(grace_of(Some("")).unwrap(), 86_400);
        assert_eq!(grace_of(Some("0")).unwrap(), 0);
        assert_eq!(grace_of(Some(" 168 ")).unwrap(), 604_800);
        for bad in ["169", "-1", "1.5", "soon"] {
            assert!(
                why(grace_of(Some(bad))).starts_with("Grace must be"),
                "{bad}"
            );
        }
    }
}
