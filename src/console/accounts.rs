//! The account list (`GET /console/accounts`): search by email or id, the exhausted
//! ones only, a page of 50 at a time in id order. The admin API's list
//! (`GET /admin/v1/accounts`) with its checks, shown as a table.

use axum::extract::State;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;
use maud::html;
use serde::Deserialize;

use super::overview::accounts_table;
use super::page::{Frame, Problem, Section, html_response, shell};
use super::session::ConsoleSession;
use crate::error::ApiError;
use crate::state::AppState;
use crate::usage::series::{self, AccountPage};
use crate::web::params::{cursor_of, search_of};

/// Accounts per page.
const PAGE: i64 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    q: Option<String>,
    /// A checkbox: present (`on`) or absent.
    exhausted: Option<String>,
    cursor: Option<String>,
}

pub async fn page(
    State(state): State<AppState>,
    session: ConsoleSession,
    query: Result<axum::extract::Query<ListQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let query = query.map(|q| q.0).unwrap_or_default();
    let exhausted = query.exhausted.as_deref().is_some_and(|v| !v.is_empty());
    let listed = match (
        search_of(query.q.as_deref()),
        cursor_of(query.cursor.as_deref()),
    ) {
        (Ok(q), Ok(after)) => {
            let mut conn = state.db.acquire().await?;
            let now = Utc::now();
            let free = state.config.usage.free_monthly_calls;
            Ok(series::accounts(&mut conn, q, exhausted, after, PAGE, now, free).await?)
        }
        (Err(ApiError::Validation(why)), _) | (_, Err(ApiError::Validation(why))) => Err(why),
        (Err(other), _) | (_, Err(other)) => return Err(other.into()),
    };
    let status = if listed.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    let q = query.q.as_deref().unwrap_or_default();
    let content = html! {
        h1 { "Accounts" }
        form.search method="get" action="/console/accounts" role="search" {
            label for="q" { "Email or account id" }
            input #q type="search" name="q" value=(q) maxlength="254" placeholder="ada@example.com or 42";
            label.check {
                input #exhausted type="checkbox" name="exhausted" checked[exhausted];
                " Exhausted only"
            }
            button type="submit" { "Search" }
        }
        @match &listed {
            Err(why) => { p.flash.error role="alert" { (why) } }
            Ok(AccountPage { accounts, next_cursor }) => {
                @if accounts.is_empty() {
                    p.empty { "No account matches." }
                } @else {
                    (accounts_table(accounts))
                }
                nav.pages {
                    @if query.cursor.as_deref().is_some_and(|c| !c.is_empty()) {
                        a href=(list_url(q, exhausted, None)) { "First page" }
                    }
                    @if let Some(next) = next_cursor {
                        a rel="next" href=(list_url(q, exhausted, Some(*next))) { "Next page" }
                    }
                }
            }
        }
    };
    let frame = Frame {
        section: Section::Accounts,
        csrf: session.csrf(),
        flash: session.flash.as_ref(),
    };
    Ok(html_response(
        status,
        shell("Accounts", Some(frame), content),
    ))
}

/// The list's address with this search, filter and cursor.
fn list_url(q: &str, exhausted: bool, cursor: Option<i64>) -> String {
    let mut url = String::from("/console/accounts?q=");
    url.extend(percent_encoding::utf8_percent_encode(
        q,
        percent_encoding::NON_ALPHANUMERIC,
    ));
    if exhausted {
        url.push_str("&exhausted=on");
    }
    if let Some(cursor) = cursor {
        url.push_str(&format!("&cursor={cursor}"));
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_keeps_the_search_and_filter() {
        assert_eq!(
            list_url("a b&c", true, Some(42)),
            "/console/accounts?q=a%20b%26c&exhausted=on&cursor=42"
        );
        assert_eq!(list_url("", false, None), "/console/accounts?q=");
    }
}
