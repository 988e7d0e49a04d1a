//! The standings a replica reads when it starts: the accounts with calls this month, a
//! page at a time, so that their first calls read nothing from PostgreSQL.

use std::sync::atomic::Ordering;
use std::time::Instant;

use chrono::{DateTime, Utc};

use super::{Entry, Inner, MAX_ENTRIES};
use crate::month::{Day, Month};
use crate::usage::report::month_standing_pages;

/// Most standings read at start, and the accounts read per statement meanwhile.
const PRELOAD_MAX: usize = MAX_ENTRIES / 2;
const PRELOAD_PAGE: i64 = 1_000;

impl Inner {
    /// Reads the standings of the accounts with calls this month, a page at a time, into
    /// entries not read meanwhile; a page during which entries went stale is left out
    /// (its accounts are read on their first call). A failure only ends the preload.
    pub(super) async fn preload(&self, now: DateTime<Utc>) {
        let (month, day) = (Month::containing(now), Day::containing(now));
        let mut seen = self.changes.load(Ordering::Relaxed);
        let mut loaded = 0usize;
        let read = month_standing_pages(
            &self.db,
            month,
            now,
            self.free_monthly_calls,
            PRELOAD_PAGE,
            |page| {
                let changes = self.changes.load(Ordering::SeqCst);
                if changes == seen {
                    let mut inserted = Vec::with_capacity(page.len());
                    for standing in page {
                        if standing.daily.is_some() {
                            self.throttler.watch_daily();
                        }
                        let at = Instant::now();
                        let account_id = standing.account_id;
                        if let dashmap::Entry::Vacant(vacant) = self.entries.entry(account_id) {
                            vacant.insert(Entry {
                                standing,
                                month,
                                day,
                                loaded_at: at,
                                block: 0,
                                block_day: day,
                                block_lease_until: at,
                                block_used_at: at,
                            });
                            inserted.push(account_id);
                        }
                    }
                    // Made stale while being put in: read on their first call instead.
                    if self.changes.load(Ordering::SeqCst) == changes {
                        loaded += inserted.len();
                    } else {
                        for account_id in inserted {
                            self.entries.remove_if(&account_id, |_, e| e.block == 0);
                        }
                    }
                }
                seen = self.changes.load(Ordering::SeqCst);
                loaded < PRELOAD_MAX && self.entries.len() < PRELOAD_MAX
            },
        )
        .await;
        metrics::counter!("tollgate_standing_reads_total", "source" => "start")
            .increment(loaded as u64);
        match read {
            Ok(()) => tracing::info!(accounts = loaded, "standings of this month read"),
            Err(e) => tracing::warn!(
                accounts = loaded,
                error = %e,
                "reading this month's standings stopped; the rest are read on first call"
            ),
        }
    }
}
