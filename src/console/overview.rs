//! The overview (`GET /console/`): calls per day this month over every account, the
//! accounts exhausted now, and the ten that used the most this month.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;
use maud::{Markup, html};

use super::page::{Frame, Problem, Section, grouped, html_response, shell};
use super::session::ConsoleSession;
use crate::month::Month;
use crate::state::AppState;
use crate::usage::series::{self, AccountRow};
use crate::web::chart::{daily_calls, days_in};

/// Exhausted accounts listed on the overview (all of them are counted).
const EXHAUSTED_SHOWN: usize = 20;
/// Accounts in the top list.
const TOP: i64 = 10;

pub async fn page(
    State(state): State<AppState>,
    session: ConsoleSession,
) -> Result<Response, Problem> {
    let now = Utc::now();
    let month = Month::containing(now);
    let free = state.config.usage.free_monthly_calls;
    let mut conn = state.db.acquire().await?;
    let days = series::daily_totals(&mut conn, &state.past_days, month, now).await?;
    let (exhausted_count, exhausted) =
        series::exhausted_now(&mut conn, EXHAUSTED_SHOWN, now, free).await?;
    let top = series::top_accounts(&mut conn, TOP, now, free).await?;
    drop(conn);

    let calls: i64 = days.iter().map(|d| d.calls).sum();
    let units: i64 = days.iter().map(|d| d.cost).sum();
    let content = html! {
        h1 { "Overview" span.sub { (month) " (UTC)" } }
        dl.figures {
            div { dt { "Calls this month" } dd #calls-month { (grouped(calls)) } }
            div { dt { "Units this month" } dd { (grouped(units)) } }
            div { dt { "Exhausted now" } dd #exhausted-count { (grouped(exhausted_count as i64)) } }
        }
        section {
            h2 { "Calls per day" }
            (daily_calls(&days, days_in(month), &format!("Calls per day, {month}")))
        }
        section #exhausted {
            h2 { "Exhausted now" }
            @if exhausted.is_empty() {
                p.empty { "No account has used up its month." }
            } @else {
                (accounts_table(&exhausted))
                @if exhausted_count > exhausted.len() {
                    p { a href="/console/accounts?exhausted=on" { "All " (grouped(exhausted_count as i64)) " exhausted accounts" } }
                }
            }
        }
        section #top {
            h2 { "Top " (TOP) " by use this month" }
            @if top.is_empty() {
                p.empty { "No calls this month yet." }
            } @else {
                (accounts_table(&top))
            }
        }
    };
    let frame = Frame {
        section: Section::Overview,
        csrf: session.csrf(),
        flash: session.flash.as_ref(),
    };
    Ok(html_response(
        StatusCode::OK,
        shell("Overview", Some(frame), content),
    ))
}

/// Accounts with where they stand this month, each linking to its page; shared with
/// the account list.
pub fn accounts_table(rows: &[AccountRow]) -> Markup {
    html! {
        table.accounts {
            thead { tr {
                th.num { "Account" } th { "Email" } th { "Plan" }
                th.num { "Used" } th.num { "Allowance" } th.num { "Credits" } th { "" }
            } }
            tbody {
                @for row in rows {
                    tr data-account=(row.account_id) {
                        td.num { a href=(format!("/console/accounts/{}", row.account_id)) { (row.account_id) } }
                        td { a href=(format!("/console/accounts/{}", row.account_id)) { (row.email) } }
                        td { (row.standing.plan) }
                        td.num { (grouped(row.standing.used)) }
                        td.num { (grouped(row.standing.allowance)) }
                        td.num { (grouped(row.standing.credits)) }
                        td {
                            @if row.standing.exhausted() { span.badge.exhausted { "exhausted" } }
                        }
                    }
                }
            }
        }
    }
}
