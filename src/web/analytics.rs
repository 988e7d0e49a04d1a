//! Usage analytics as the page faces show them (SPEC §18): an account's calls by route
//! and by key, and its daily latency percentiles as a chart, over a month up to today.
//! The portal's overview and the console's account page both show them; neither face
//! knows the other's.
//!
//! The figures are the analytics report's (`GET /account/v1/analytics`), read three
//! times, once per grouping; the key table names each key from the account's key list.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use maud::{Markup, html};
use sqlx::PgConnection;

use super::chart::{daily_latency, days_in, ms_text};
use super::page::grouped;
use crate::accounts::keys::KeySummary;
use crate::month::Month;
use crate::usage::analytics::report::AnalyticsRow;
use crate::usage::analytics::{GroupBy, analytics};

/// An account's analytics over one month up to today.
#[derive(Debug, Clone)]
pub struct MonthAnalytics {
    pub month: Month,
    /// First and last UTC day read; `None` for a month that has not begun.
    pub days: Option<(NaiveDate, NaiveDate)>,
    /// Routes with calls, most calls first.
    pub by_route: Vec<AnalyticsRow>,
    /// Keys with calls, most calls first.
    pub by_key: Vec<AnalyticsRow>,
    /// Every day of the range, from the month's first.
    pub by_day: Vec<AnalyticsRow>,
}

impl MonthAnalytics {
    /// `account_id`'s analytics in `month` from its first day to today (all of a past
    /// month, none of a future one).
    pub async fn read(
        conn: &mut PgConnection,
        account_id: i64,
        month: Month,
        now: DateTime<Utc>,
    ) -> Result<Self, sqlx::Error> {
        let from = month.start().date_naive();
        let to = (month.end() - Duration::days(1))
            .date_naive()
            .min(now.date_naive());
        let mut read = Self {
            month,
            days: None,
            by_route: Vec::new(),
            by_key: Vec::new(),
            by_day: Vec::new(),
        };
        if to < from {
            return Ok(read);
        }
        read.days = Some((from, to));
        read.by_route = analytics(conn, account_id, from, to, GroupBy::Route)
            .await?
            .rows;
        read.by_key = analytics(conn, account_id, from, to, GroupBy::Key)
            .await?
            .rows;
        read.by_day = analytics(conn, account_id, from, to, GroupBy::Day)
            .await?
            .rows;
        Ok(read)
    }

    fn calls(&self) -> i64 {
        self.by_route.iter().map(|r| r.calls).sum()
    }
}

/// The three parts, each a `section` under its own `h2`: calls by route
/// (`#calls-by-route`, rows `data-route`), calls by key (`#calls-by-key`, rows
/// `data-key`, not the key list's `data-key-id`; names and prefixes from `keys`), and the
/// latency chart (`#latency`). When the range has no calls, one section (`#calls`)
/// saying so in `empty`'s words.
pub fn analytics_sections(read: &MonthAnalytics, keys: &[KeySummary], empty: &str) -> Markup {
    let range = match read.days {
        Some((from, to)) if from == to => format!("{from}, UTC"),
        Some((from, to)) => format!("{from} to {to}, UTC"),
        None => format!("{}, UTC", read.month),
    };
    if read.calls() == 0 {
        return html! {
            section #calls {
                h2 { "Calls and latency" }
                p.empty { (empty) " (" (range) ")." }
            }
        };
    }
    html! {
        section #calls-by-route {
            h2 { "Calls by route" }
            p.hint { (range) "; latency is the upstream's, from request sent to answer, in ms." }
            table.analytics {
                thead { tr {
                    th { "Route" } th.num { "Calls" } th.num { "Units" } th.num { "Errors" }
                    th.num { "p50 ms" } th.num { "p95 ms" } th.num { "p99 ms" }
                } }
                tbody { @for row in &read.by_route {
                    tr data-route=[row.route.as_deref()] {
                        td { code { (row.route.as_deref().unwrap_or("")) } }
                        (figures(row))
                        @for ms in [row.latency_ms.p50, row.latency_ms.p95, row.latency_ms.p99] {
                            td.num { @match ms { Some(ms) => (ms_text(ms)), None => "—" } }
                        }
                    }
                } }
            }
        }
        section #calls-by-key {
            h2 { "Calls by key" }
            p.hint { (range) "." }
            table.analytics {
                thead { tr {
                    th.num { "Id" } th { "Key" } th.num { "Calls" } th.num { "Units" } th.num { "Errors" }
                } }
                tbody { @for row in &read.by_key {
                    @let key = keys.iter().find(|k| Some(k.key_id) == row.key_id);
                    tr data-key=[row.key_id] {
                        td.num { @if let Some(id) = row.key_id { (id) } }
                        td { @match key {
                            Some(k) => {
                                span.key-name { (k.name) } " " code { (k.prefix) "…" }
                                @if k.revoked_at.is_some() { " " span.badge.exhausted { "revoked" } }
                            }
                            None => span.hint { "not listed" },
                        } }
                        (figures(row))
                    }
                } }
            }
        }
        section #latency {
            h2 { "Latency per day" }
            (daily_latency(&read.by_day, days_in(read.month), &format!("Upstream latency per day, {} (UTC)", read.month)))
        }
    }
}

/// Calls, units and errors, as cells; the calls also as `data-calls`.
fn figures(row: &AnalyticsRow) -> Markup {
    html! {
        td.num data-calls=(row.calls) { (grouped(row.calls)) }
        td.num { (grouped(row.units)) }
        td.num data-errors=(row.errors) { (grouped(row.errors)) }
    }
}
