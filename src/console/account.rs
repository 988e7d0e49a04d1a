//! One account (`GET /console/accounts/{id}[?month=YYYY-MM]`): where it stands this
//! month, its usage per day as a chart, its calls by route and by key with a chart of
//! daily latency (SPEC §18), its subscriptions, its keys (name, prefix — never a key —,
//! expiry, scopes, last use, limits) and top-ups, and the forms that add a subscription
//! or a top-up (handled in [`super::forms`], which shows this page again with the form's
//! error); last, the latest changes of its audit log.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Duration, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::page::{Frame, Problem, Section, csrf_field, grouped, html_response, shell};
use super::session::ConsoleSession;
use crate::accounts::keys::keys_of;
use crate::audit::latest;
use crate::error::ApiError;
use crate::month::Month;
use crate::state::AppState;
use crate::usage::grants::load_subscriptions;
use crate::usage::report::usage_report;
use crate::usage::rules::active_subscription;
use crate::usage::series;
use crate::usage::topups::topups_of;
use crate::web::analytics::{MonthAnalytics, analytics_sections};
use crate::web::audit::{SHOWN, audit_table};
use crate::web::chart::{daily_calls, days_in};
use crate::web::page::usd;
use crate::web::params::{MonthQuery, month_or_current};

/// Date fields are plain text in one stated format: a browser's `datetime-local` field
/// shows the reader's locale (US month-first, say) under a "UTC" label.
const DATE_HINT: &str = "now";
const DATE_TITLE: &str =
    "UTC, as YYYY-MM-DD HH:MM (or YYYY-MM-DD for midnight, or RFC 3339 with an offset)";

/// Keys and top-ups listed at most (the newest top-ups, the oldest keys).
const LISTED: i64 = 100;

/// The subscription form's fields as sent (all text, so a bad one is shown, not refused).
#[derive(Debug, Default, Clone, Deserialize)]
pub struct SubscriptionFields {
    pub csrf: Option<String>,
    pub plan: Option<String>,
    pub monthly_allowance: Option<String>,
    pub daily_allowance: Option<String>,
    pub enforcement: Option<String>,
    pub starts_at: Option<String>,
    pub expires_at: Option<String>,
}

/// The top-up form's fields as sent.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct TopUpFields {
    pub csrf: Option<String>,
    pub calls: Option<String>,
    pub expires_at: Option<String>,
}

/// A form sent back with what was wrong, to show again as it was filled in.
#[derive(Debug, Default)]
pub struct Echo {
    pub subscription: Option<(SubscriptionFields, String)>,
    pub top_up: Option<(TopUpFields, String)>,
}

pub async fn page(
    State(state): State<AppState>,
    session: ConsoleSession,
    Path(account_id): Path<String>,
    query: Result<Query<MonthQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let account_id = account_id.parse().map_err(|_| ApiError::AccountNotFound)?;
    let query = query.map_err(ApiError::from)?.0;
    let month = month_or_current(&query, Utc::now())?;
    render(&state, &session, account_id, month, &Echo::default()).await
}

/// The account page for `month`, with `echo`'s forms as sent; `422` when one is there.
pub async fn render(
    state: &AppState,
    session: &ConsoleSession,
    account_id: i64,
    month: Month,
    echo: &Echo,
) -> Result<Response, Problem> {
    let now = Utc::now();
    let free = state.config.usage.free_monthly_calls;
    let mut conn = state.db.acquire().await?;
    let account: Option<(String, DateTime<Utc>)> =
        sqlx::query_as("SELECT email, created_at FROM account WHERE id = $1")
            .bind(account_id)
            .fetch_optional(&mut *conn)
            .await?;
    let Some((email, created_at)) = account else {
        return Err(ApiError::AccountNotFound.into());
    };
    let report = usage_report(&mut conn, account_id, month, now, free)
        .await?
        .ok_or(ApiError::AccountNotFound)?;
    let days = series::daily(&mut conn, account_id, month, now).await?;
    let calls = MonthAnalytics::read(&mut conn, account_id, month, now).await?;
    let mut subscriptions = load_subscriptions(&mut conn, &[account_id])
        .await?
        .remove(&account_id)
        .unwrap_or_default();
    let active = active_subscription(&subscriptions, month.judged_at(now)).map(|s| s.id);
    subscriptions.sort_by_key(|s| std::cmp::Reverse((s.starts_at, s.id)));
    let top_ups = topups_of(&mut conn, account_id, LISTED).await?;
    let audit = latest(&mut conn, account_id, SHOWN).await?;
    drop(conn);
    let keys = keys_of(&state.db, account_id, i64::MIN, LISTED).await?;

    let previous = Month::containing(month.start() - Duration::microseconds(1));
    let current = Month::containing(now);
    let content = html! {
        h1 { (email) span.sub { "account " (account_id) ", since " (day(created_at)) } }
        dl.figures #standing {
            div { dt { "Plan" } dd #plan { (report.plan) " (" (report.enforcement.as_str()) ")" } }
            div { dt { "Used" } dd #used { (grouped(report.used)) } }
            div { dt { "Allowance" } dd #allowance { (grouped(report.allowance)) } }
            div { dt { "Credits" } dd #credits { (grouped(report.credits)) } }
            div { dt { "Remaining" } dd #remaining { (grouped(report.remaining)) } }
            @if let Some(daily) = &report.daily {
                div { dt { "Today" } dd { (grouped(daily.used)) " of " (grouped(daily.allowance)) } }
            }
            @if let Some(minute) = report.budget.minute_allowance {
                div { dt { "This minute" } dd #minute {
                    (grouped(state.minutes.state(account_id, minute, now).used)) " of " (grouped(minute))
                } }
            }
            @if let Some(price) = report.budget.unit_price_micros {
                div { dt { "Unit price" } dd #unit_price { (usd(price)) } }
                div { dt { "Spent today" } dd #spent_day {
                    (usd(report.spent_micros.day))
                    @if let Some(cap) = report.budget.spend_cap_day_micros { " of " (usd(cap)) }
                } }
                div { dt { "Spent, month" } dd #spent_month {
                    (usd(report.spent_micros.month))
                    @if let Some(cap) = report.budget.spend_cap_month_micros { " of " (usd(cap)) }
                } }
            }
            @if report.exhausted { div { dt { "State" } dd { span.badge.exhausted { "exhausted" } } } }
        }
        section #usage {
            h2 { "Usage per day, " (month) " (UTC)" }
            nav.pages {
                a href=(format!("/console/accounts/{account_id}?month={previous}")) { "← " (previous) }
                @if month < current {
                    a href=(format!("/console/accounts/{account_id}?month={}", month.next())) { (month.next()) " →" }
                }
            }
            (daily_calls(&days, days_in(month), &format!("Calls per day, {month}")))
        }
        (analytics_sections(&calls, &keys, "No calls in this month"))
        section #subscriptions {
            h2 { "Subscriptions" }
            table {
                thead { tr { th.num { "Id" } th { "Plan" } th.num { "Monthly" } th.num { "Daily" } th { "Enforcement" } th { "Starts" } th { "Expires" } th { "" } } }
                tbody {
                    @for s in &subscriptions {
                        tr {
                            td.num { (s.id) } td { (s.plan) } td.num { (grouped(s.default_allowance(free))) }
                            td.num { @if let Some(d) = s.daily_allowance { (grouped(d)) } @else { "—" } }
                            td { (s.enforcement.as_str()) } td { (instant(s.starts_at)) }
                            td { @if let Some(end) = s.expires_at { (instant(end)) } @else { "never" } }
                            td { @if active == Some(s.id) { span.badge.active { "active" } } }
                        }
                    }
                }
            }
            (subscription_form(state, session.csrf(), account_id, echo.subscription.as_ref()))
        }
        section #keys {
            h2 { "API keys" }
            @if keys.is_empty() { p.empty { "No keys." } } @else {
                table {
                    thead { tr {
                        th.num { "Id" } th { "Key" } th { "Created" } th { "Revoked" }
                        th.num { "Used this month" } th.num { "Monthly limit" } th { "Expires" }
                        th { "Scopes" } th { "Last used" } th { "Rate limit" } th { "" }
                    } }
                    tbody { @for k in &keys {
                        @let expired = k.revoked_at.is_none() && k.expires_at.is_some_and(|at| at <= now);
                        tr data-key-id=(k.key_id) {
                            td.num { (k.key_id) }
                            td { span.key-name { (k.name) } " " code { (k.prefix) "…" } }
                            td { (instant(k.created_at)) }
                            td { @if let Some(at) = k.revoked_at { (instant(at)) } @else { "—" } }
                            td.num data-used=(k.used) { (grouped(k.used)) }
                            td.num data-limit=[k.monthly_limit] {
                                @match k.monthly_limit { Some(n) => (grouped(n)), None => "none" }
                            }
                            td.expires { @if let Some(at) = k.expires_at { (instant(at)) } @else { "never" } }
                            td.scopes { @for (i, scope) in k.scopes.iter().enumerate() {
                                @if i > 0 { br; }
                                code { (scope) }
                            } }
                            td.last-used { @if let Some(at) = k.last_used_at { (instant(at)) } @else { "never" } }
                            td.rate-limit { @if let Some(r) = &k.rate_limit {
                                (grouped(i64::from(r.per_second))) "/s, burst " (grouped(i64::from(r.burst)))
                            } @else { "none" } }
                            td {
                                @if k.revoked_at.is_none() && k.monthly_limit.is_some_and(|n| k.used >= n) {
                                    span.badge.exhausted { "used up" } " "
                                }
                                @if expired { span.badge.exhausted { "expired" } }
                            }
                        }
                    } }
                }
            }
        }
        section #top-ups {
            h2 { "Top-ups" }
            @if top_ups.is_empty() { p.empty { "No top-ups." } } @else {
                table {
                    thead { tr { th.num { "Id" } th.num { "Units" } th.num { "Left" } th { "Expires" } th { "Added" } } }
                    tbody { @for t in &top_ups {
                        tr { td.num { (t.id) } td.num { (grouped(t.calls)) } td.num { (grouped(t.remaining)) }
                             td { @if let Some(end) = t.expires_at { (instant(end)) } @else { "never" } }
                             td { (instant(t.created_at)) } }
                    } }
                }
            }
            (top_up_form(session.csrf(), account_id, echo.top_up.as_ref()))
        }
        section #audit {
            h2 { "Audit log" }
            p.hint { "The latest " (SHOWN) " changes, newest first." }
            (audit_table(&audit))
        }
    };
    let frame = Frame {
        section: Section::Accounts,
        csrf: session.csrf(),
        flash: session.flash.as_ref(),
    };
    let status = if echo.subscription.is_some() || echo.top_up.is_some() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    Ok(html_response(status, shell(&email, Some(frame), content)))
}

fn subscription_form(
    state: &AppState,
    csrf: &str,
    account_id: i64,
    echo: Option<&(SubscriptionFields, String)>,
) -> Markup {
    let (fields, error) = echo.map_or((SubscriptionFields::default(), None), |(f, e)| {
        (f.clone(), Some(e.as_str()))
    });
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let enforcement = value(&fields.enforcement);
    html! {
        form.panel #add-subscription method="post" action=(format!("/console/accounts/{account_id}/subscriptions")) {
            h3 { "Add a subscription" }
            @if let Some(error) = error { p.flash.error role="alert" { (error) } }
            (csrf_field(csrf))
            label { "Plan" input name="plan" list="catalogue" required value=(value(&fields.plan)); }
            datalist #catalogue { @for plan in state.catalogue.current().iter() { option value=(plan.name) {} } }
            label { "Monthly allowance" input name="monthly_allowance" inputmode="numeric" placeholder="the catalogue's" value=(value(&fields.monthly_allowance)); }
            label { "Daily allowance" input name="daily_allowance" inputmode="numeric" placeholder="none" value=(value(&fields.daily_allowance)); }
            label { "Enforcement"
                select name="enforcement" {
                    option value="" selected[enforcement.is_empty()] { "the plan's (soft)" }
                    option value="soft" selected[enforcement == "soft"] { "soft" }
                    option value="hard" selected[enforcement == "hard"] { "hard" }
                }
            }
            label { "Starts, UTC (YYYY-MM-DD HH:MM)" input name="starts_at" placeholder=(DATE_HINT) title=(DATE_TITLE) value=(value(&fields.starts_at)); }
            label { "Expires, UTC (YYYY-MM-DD HH:MM)" input name="expires_at" placeholder="never" title=(DATE_TITLE) value=(value(&fields.expires_at)); }
            button type="submit" { "Add subscription" }
        }
    }
}

fn top_up_form(csrf: &str, account_id: i64, echo: Option<&(TopUpFields, String)>) -> Markup {
    let (fields, error) = echo.map_or((TopUpFields::default(), None), |(f, e)| {
        (f.clone(), Some(e.as_str()))
    });
    html! {
        form.panel #add-top-up method="post" action=(format!("/console/accounts/{account_id}/top-ups")) {
            h3 { "Add a top-up" }
            @if let Some(error) = error { p.flash.error role="alert" { (error) } }
            (csrf_field(csrf))
            label { "Units" input name="calls" inputmode="numeric" required value=(fields.calls.unwrap_or_default()); }
            label { "Expires, UTC (YYYY-MM-DD HH:MM)" input name="expires_at" placeholder="never" title=(DATE_TITLE) value=(fields.expires_at.unwrap_or_default()); }
            button type="submit" { "Add top-up" }
        }
    }
}

fn instant(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn day(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d").to_string()
}
