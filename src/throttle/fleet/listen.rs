//! Each process's LISTEN on `fleet_marker`'s notifications: how a marker written by any
//! process of the fleet reaches every replica's view within a second.
//!
//! On (re)connect the listener LISTENs first, then loads the whole table: a change
//! committed while the table is read is both in what was read and notified afterwards,
//! and notifications come in commit order, each carrying the row's new state, so
//! applying them over the loaded view ends on the table's state. A `reload` (a statement
//! that changed many rows, e.g. a first listing) is read the same way, inline, so no
//! later notification is overtaken by it. While the connection is lost the view keeps
//! what it had and ages: with no `listed:` heard it turns stale and admission fails open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::{CHANNEL, MarkerKind, table};
use crate::month::{Day, Month};
use crate::telemetry::RateLimitedLog;
use crate::throttle::core::Inner;

/// Pause before reconnecting a failed listener.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// One notification on [`CHANNEL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Notice {
    Marker {
        kind: MarkerKind,
        account_id: i64,
        period_start_unix: i64,
        marked: bool,
    },
    /// Many rows changed: read the table again.
    Reload,
    /// The lister listed KV; the next listing is planned this far ahead.
    Listed(Duration),
}

impl Notice {
    pub(super) fn parse(payload: &str) -> Option<Notice> {
        if payload == "reload" {
            return Some(Notice::Reload);
        }
        if let Some(ms) = payload.strip_prefix("listed:") {
            return ms
                .parse()
                .ok()
                .map(Duration::from_millis)
                .map(Notice::Listed);
        }
        let mut parts = payload.split(':');
        let notice = Notice::Marker {
            kind: MarkerKind::parse(parts.next()?)?,
            account_id: parts.next()?.parse().ok()?,
            period_start_unix: parts.next()?.parse().ok()?,
            marked: match parts.next()? {
                "1" => true,
                "0" => false,
                _ => return None,
            },
        };
        parts.next().is_none().then_some(notice)
    }
}

/// Runs until `stop`, reconnecting after any failure.
pub(in crate::throttle) async fn run(inner: Arc<Inner>, stop: CancellationToken) {
    let log = RateLimitedLog::default();
    while !stop.is_cancelled() {
        if let Err(e) = listen(&inner, &stop).await {
            metrics::counter!("tollgate_fleet_listener_errors_total").increment(1);
            if log.allow() {
                tracing::warn!(error = %e, suppressed = log.take_suppressed(),
                    "fleet marker listener lost; this replica's view ages until it is back");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
        }
    }
}

async fn listen(inner: &Inner, stop: &CancellationToken) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(&inner.fleet.db).await?;
    listener.eager_reconnect(false);
    listener.listen(CHANNEL).await?;
    load(inner).await?;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            received = listener.try_recv() => match received? {
                Some(notification) => match Notice::parse(notification.payload()) {
                    Some(Notice::Marker { kind, account_id, period_start_unix, marked }) => {
                        inner.view.apply(kind, account_id, period_start_unix, marked);
                    }
                    Some(Notice::Reload) => load(inner).await?,
                    Some(Notice::Listed(interval)) => inner.view.listed(Instant::now(), interval),
                    None => tracing::debug!(payload = notification.payload(),
                        "unknown fleet marker notification ignored"),
                },
                None => return Err(sqlx::Error::Protocol("listener connection closed".into())),
            },
        }
    }
}

/// Reads the table's markers of this month and day into the view.
async fn load(inner: &Inner) -> Result<(), sqlx::Error> {
    let now = Utc::now();
    let (month, day) = (Month::containing(now), Day::containing(now));
    let read_at = Instant::now();
    let loaded = table::load(&inner.fleet.db, month.start_unix(), day.start_unix()).await?;
    inner
        .view
        .load((month, loaded.month), (day, loaded.day), read_at);
    if let Some(listed_at) = loaded.listed_ago.and_then(|ago| read_at.checked_sub(ago)) {
        inner.view.listed(listed_at, loaded.interval);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_triggers_payloads_parse() {
        assert_eq!(
            Notice::parse("month:42:1796083200:1"),
            Some(Notice::Marker {
                kind: MarkerKind::Month,
                account_id: 42,
                period_start_unix: 1_796_083_200,
                marked: true
            })
        );
        assert_eq!(
            Notice::parse("day:7:1796083200:0"),
            Some(Notice::Marker {
                kind: MarkerKind::Day,
                account_id: 7,
                period_start_unix: 1_796_083_200,
                marked: false
            })
        );
        assert_eq!(Notice::parse("reload"), Some(Notice::Reload));
        assert_eq!(
            Notice::parse("listed:600"),
            Some(Notice::Listed(Duration::from_millis(600)))
        );
    }

    #[test]
    fn anything_else_is_ignored() {
        for payload in [
            "",
            "week:1:2:1",
            "month:x:2:1",
            "month:1:2:2",
            "month:1:2:1:9",
            "listed:soon",
        ] {
            assert_eq!(Notice::parse(payload), None, "{payload}");
        }
    }
}
