//! The overview (SPEC §12): the figures of `GET /account/v1/usage` (the same report,
//! [`usage_response`]), the daily window when the plan has one, a chart of units per
//! day this month from the series the admin daily-usage route reads, this month's calls
//! by route and by key with a chart of daily latency (SPEC §18), and the latest changes
//! of the account's audit log (SPEC §19).

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::Utc;
use maud::html;
use serde::Deserialize;

use super::page::{Frame, PortalProblem, Section, notice, ok, shell};
use super::session::Customer;
use crate::accounts::keys::keys_of;
use crate::audit::latest;
use crate::state::AppState;
use crate::usage::series;
use crate::web::analytics::{MonthAnalytics, analytics_sections};
use crate::web::audit::{SHOWN, audit_table};
use crate::web::chart::{daily_units, days_in};
use crate::web::page::{grouped, usd};
use crate::web::params::{MonthQuery, usage_response};

/// Keys named in the calls-by-key table at most (the oldest; the account's live keys are
/// far fewer).
const NAMED_KEYS: i64 = 100;

/// `?done=`, the notice a form left.
#[derive(Debug, Deserialize)]
pub struct Done {
    pub done: Option<String>,
}

/// The overview page.
pub async fn page(
    State(state): State<AppState>,
    customer: Customer,
    Query(done): Query<Done>,
) -> Result<Response, PortalProblem> {
    let report = usage_response(&state, customer.account_id, &MonthQuery { month: None })
        .await?
        .0;
    let month = crate::month::Month::containing(report.month_start);
    let now = Utc::now();
    let (days, calls, audit) = {
        let mut conn = state.db.acquire().await?;
        let days = series::daily(&mut conn, customer.account_id, month, now).await?;
        let calls = MonthAnalytics::read(&mut conn, customer.account_id, month, now).await?;
        (
            days,
            calls,
            latest(&mut conn, customer.account_id, SHOWN).await?,
        )
    };
    let keys = keys_of(&state.db, customer.account_id, i64::MIN, NAMED_KEYS).await?;
    let figures = [
        ("plan", "Plan", report.plan.clone()),
        ("allowance", "Allowance", grouped(report.allowance)),
        ("used", "Used", grouped(report.used)),
        ("remaining", "Remaining", grouped(report.remaining)),
        ("credits", "Credits", grouped(report.credits)),
        (
            "month_end",
            "Month ends",
            report.month_end.format("%Y-%m-%d %H:%M UTC").to_string(),
        ),
    ];
    let content = html! {
        h1 { "Overview" }
        p.hint { "Account " (customer.account_id) ", " (month) " (UTC)." }
        dl.figures {
            @for (id, label, value) in &figures {
                div data-figure=(id) { dt { (label) } dd { (value) } }
            }
        }
        @if let Some(daily) = &report.daily {
            h2 { "Today" }
            dl.figures {
                div data-figure="daily_allowance" { dt { "Daily allowance" } dd { (grouped(daily.allowance)) } }
                div data-figure="daily_used" { dt { "Used today" } dd { (grouped(daily.used)) } }
                div data-figure="daily_remaining" { dt { "Left today" } dd { (grouped(daily.remaining)) } }
            }
        }
        @if let Some(minute) = report.budget.minute_allowance {
            @let now_minute = state.minutes.state(customer.account_id, minute, now);
            h2 { "This minute" }
            dl.figures {
                div data-figure="minute_allowance" { dt { "Units per minute" } dd { (grouped(minute)) } }
                div data-figure="minute_used" { dt { "Used this minute" } dd { (grouped(now_minute.used)) } }
                div data-figure="minute_resets" { dt { "Resets in" } dd { (now_minute.reset_in) " s" } }
            }
            p.hint { "Units per fixed minute of the clock (UTC). Used: as the gateway answering this page counts them." }
        }
        @if let Some(price) = report.budget.unit_price_micros {
            h2 { "Spend" }
            dl.figures {
                div data-figure="unit_price" { dt { "Price per unit" } dd { (usd(price)) } }
                div data-figure="spent_day" { dt { "Spent today" } dd {
                    (usd(report.spent_micros.day))
                    @if let Some(cap) = report.budget.spend_cap_day_micros { " of " (usd(cap)) }
                } }
                div data-figure="spent_month" { dt { "Spent this month" } dd {
                    (usd(report.spent_micros.month))
                    @if let Some(cap) = report.budget.spend_cap_month_micros { " of " (usd(cap)) }
                } }
            }
            @if report.budget.has_caps() {
                p.hint { "Calls are refused once a cap is reached, until its day or month ends." }
            }
        }
        h2 { "Units per day" }
        (daily_units(&days, days_in(month), &format!("Units per day, {month}")))
        (analytics_sections(&calls, &keys, "No calls yet this month: calls through your keys show here by route, by key and by day"))
        section #audit {
            h2 { "Recent changes" }
            p.hint { "The latest " (SHOWN) " changes of your keys and plan, newest first." }
            (audit_table(&audit))
        }
    };
    let frame = Frame {
        section: Section::Overview,
        csrf: customer.csrf(),
        notice: notice(done.done.as_deref()),
    };
    Ok(ok(shell("Overview", Some(frame), content)))
}
