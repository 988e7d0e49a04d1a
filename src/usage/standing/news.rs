//! Other replicas' news of the accounts this replica keeps (`NOTIFY` on [`CHANNEL`]):
//! figures a batch committed update an entry in place, anything else has it read again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::{ENTRY_TTL, Entry, Inner};
use crate::month::{Day, Month};
use crate::usage::announce::{CHANNEL, News};

impl Inner {
    /// Applies other replicas' notifications until `stop`. What changed before LISTEN took
    /// effect is unknown: every (re)connect starts over (keeping held blocks).
    pub(super) async fn listen(
        &self,
        stop: CancellationToken,
        started_over: Arc<tokio::sync::Notify>,
    ) {
        let inner = self;
        crate::db::listen(
            &inner.db,
            CHANNEL,
            "standing",
            &stop,
            || {
                inner.changes.fetch_add(1, Ordering::SeqCst);
                inner.entries.retain(|_, e| e.block > 0);
                started_over.notify_one();
            },
            |payload| {
                let Some((from, ids)) = payload.split_once('|') else {
                    return;
                };
                if from == inner.replica.to_string() {
                    return;
                }
                for news in ids.split(',').filter_map(News::parse) {
                    // A plan changed elsewhere. Figures a batch committed are not counted:
                    // a standing read meanwhile misses them as a first call's read would,
                    // until the account's next batch or its entry's expiry.
                    if news.figures.is_none() {
                        inner.changes.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(mut entry) = inner.entries.get_mut(&news.account_id) {
                        apply_news(news, &mut entry);
                    }
                }
            },
        )
        .await;
    }
}

/// Applies another replica's news to this replica's entry of the account.
/// Figures of the entry's own month and day update it in place (and count as a fresh
/// read); anything else has it read again on its next call. A held block stays either way.
fn apply_news(news: News, entry: &mut Entry) {
    let now = Utc::now();
    match news.figures {
        Some((used, credits, today))
            if entry.month == Month::containing(now) && entry.day == Day::containing(now) =>
        {
            entry.standing.used = used;
            entry.standing.credits = credits;
            if let Some(daily) = entry.standing.daily.as_mut() {
                daily.used = today;
            }
            entry.standing.day_used = today;
            // Figures a batch just committed are as fresh as a read: the entry is fed by
            // the batches, wherever they are accounted, not read again on a timer.
            entry.loaded_at = Instant::now();
        }
        _ => entry.loaded_at = Instant::now() - ENTRY_TTL,
    }
}
