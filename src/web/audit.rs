//! The audit log as the page faces show it (SPEC §19): an account's latest events in a
//! table of when, who, what and to what. The console's account page and the portal's
//! overview both show it; neither face knows the other's.

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use crate::audit::AuditEvent;

/// Events a page shows: the account's latest.
pub const SHOWN: i64 = 20;

/// The table of `events`, newest first; a line saying so when there are none.
pub fn audit_table(events: &[AuditEvent]) -> Markup {
    html! {
        @if events.is_empty() { p.empty { "No changes recorded yet." } } @else {
            table.audit {
                thead { tr { th { "When (UTC)" } th { "Who" } th { "What" } th { "Target" } } }
                tbody { @for event in events {
                    tr data-audit-id=(event.id) data-action=(event.action) {
                        td { (when(event.at)) }
                        td { (event.actor.as_str()) @if let Some(ip) = &event.ip { " from " (ip) } }
                        td { code { (event.action) } }
                        td { code { (event.target) } }
                    }
                } }
            }
        }
    }
}

fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}
