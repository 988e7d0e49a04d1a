//! The overview (SPEC §12): the figures of `GET /account/v1/usage` (the same report,
//! [`usage_response`]), the daily window when the plan has one, and a chart of units
//! per day this month from the series the admin daily-usage route reads.

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::Utc;
use maud::html;
use serde::Deserialize;

use super::page::{Frame, PortalProblem, Section, notice, ok, shell};
use super::session::Customer;
use crate::state::AppState;
use crate::usage::series;
use crate::web::chart::{daily_units, days_in};
use crate::web::page::grouped;
use crate::web::params::{MonthQuery, usage_response};

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
    let days = {
        let mut conn = state.db.acquire().await?;
        series::daily(&mut conn, customer.account_id, month, Utc::now()).await?
    };
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
        h2 { "Units per day" }
        (daily_units(&days, days_in(month), &format!("Units per day, {month}")))
    };
    let frame = Frame {
        section: Section::Overview,
        csrf: customer.csrf(),
        notice: notice(done.done.as_deref()),
    };
    Ok(ok(shell("Overview", Some(frame), content)))
}
