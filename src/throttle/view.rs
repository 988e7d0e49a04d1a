//! The local view of the current month's exhaustion markers.
//!
//! Admission reads only this view, never KV. It is replaced by each successful listing
//! of the store and patched at once by this replica's own writes and deletes, which
//! also outlive listings for [`OWN_CHANGES_TTL`] (KV listings can lag writes by up to a
//! minute, so a fresh listing must not undo what this replica just did). A view
//! older than the staleness bound, or of another month, is treated as empty: the
//! gateway fails open rather than throttle on old news.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use crate::month::{Day, Month};

/// How long this replica's own marker writes and deletes override listings.
pub const OWN_CHANGES_TTL: Duration = Duration::from_secs(90);

#[derive(Debug)]
struct Snapshot {
    month: Option<Month>,
    accounts: HashSet<i64>,
    /// When the store was last listed successfully.
    refreshed_at: Option<Instant>,
    /// This replica's recent changes: account → (month, marked, when).
    own: HashMap<i64, (Option<Month>, bool, Instant)>,
    /// The daily window's markers: the day they are of, and the accounts marked.
    day: Option<Day>,
    day_accounts: HashSet<i64>,
}

/// What the view says about one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Marked,
    Unmarked,
    /// The view is too old to trust (or was never filled); treat as unmarked.
    Stale,
}

/// Shared, read-mostly marker set. The lock is never held across an `.await`.
#[derive(Debug)]
pub struct MarkerView {
    inner: RwLock<Snapshot>,
    max_staleness: Duration,
}

impl MarkerView {
    pub fn new(max_staleness: Duration) -> Self {
        Self {
            inner: RwLock::new(Snapshot {
                month: None,
                accounts: HashSet::new(),
                refreshed_at: None,
                own: HashMap::new(),
                day: None,
                day_accounts: HashSet::new(),
            }),
            max_staleness,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Snapshot> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Snapshot> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `account_id` is marked in `month`, as of `now`.
    pub fn lookup(&self, account_id: i64, month: Month, now: Instant) -> Lookup {
        let snap = self.read();
        let fresh = snap
            .refreshed_at
            .is_some_and(|at| now.saturating_duration_since(at) <= self.max_staleness);
        if snap.month != Some(month) {
            return if fresh {
                Lookup::Unmarked
            } else {
                Lookup::Stale
            };
        }
        if !fresh {
            return Lookup::Stale;
        }
        if snap.accounts.contains(&account_id) {
            Lookup::Marked
        } else {
            Lookup::Unmarked
        }
    }

    /// Whether this replica already knows of the marker (fresh or not).
    pub fn knows(&self, account_id: i64, month: Month) -> bool {
        let snap = self.read();
        snap.month == Some(month) && snap.accounts.contains(&account_id)
    }

    /// Replaces the whole view with a listing taken at `at`; this replica's changes of
    /// the last [`OWN_CHANGES_TTL`] still apply on top of it.
    pub fn replace(&self, month: Month, mut accounts: HashSet<i64>, at: Instant) {
        let mut snap = self.write();
        snap.own
            .retain(|_, (_, _, when)| at.saturating_duration_since(*when) < OWN_CHANGES_TTL);
        for (account_id, (changed_month, marked, _)) in &snap.own {
            if changed_month.is_some_and(|m| m != month) {
                continue;
            }
            if *marked {
                accounts.insert(*account_id);
            } else {
                accounts.remove(account_id);
            }
        }
        snap.month = Some(month);
        snap.accounts = accounts;
        snap.refreshed_at = Some(at);
    }

    /// Records a marker this replica wrote or found. A marker of a month older than the
    /// view's (a late write from before a month rolled over) leaves the view alone.
    pub fn insert(&self, account_id: i64, month: Month) {
        let mut snap = self.write();
        if snap.month.is_some_and(|current| month < current) {
            return;
        }
        if snap.month != Some(month) {
            snap.month = Some(month);
            snap.accounts.clear();
        }
        snap.accounts.insert(account_id);
        snap.own
            .insert(account_id, (Some(month), true, Instant::now()));
    }

    /// Forgets a marker this replica deleted.
    pub fn remove(&self, account_id: i64) {
        let mut snap = self.write();
        snap.accounts.remove(&account_id);
        snap.own.insert(account_id, (None, false, Instant::now()));
    }

    /// Whether `account_id` has a daily marker for `day` (fresh or not: daily markers
    /// ride on the monthly view's freshness, checked by [`MarkerView::lookup`]).
    pub fn day_marked(&self, account_id: i64, day: Day) -> bool {
        let snap = self.read();
        snap.day == Some(day) && snap.day_accounts.contains(&account_id)
    }

    /// Replaces the daily markers with a listing of `day`'s.
    pub fn replace_day(&self, day: Day, accounts: HashSet<i64>) {
        let mut snap = self.write();
        snap.day = Some(day);
        snap.day_accounts = accounts;
    }

    /// Records a daily marker this replica wrote or found; an older day's is ignored.
    pub fn insert_day(&self, account_id: i64, day: Day) {
        let mut snap = self.write();
        if snap.day.is_some_and(|current| day < current) {
            return;
        }
        if snap.day != Some(day) {
            snap.day = Some(day);
            snap.day_accounts.clear();
        }
        snap.day_accounts.insert(account_id);
    }

    /// Forgets a daily marker this replica deleted.
    pub fn remove_day(&self, account_id: i64) {
        self.write().day_accounts.remove(&account_id);
    }

    /// Number of markers held and the age of the last good listing.
    pub fn stats(&self, now: Instant) -> (usize, Option<Duration>) {
        let snap = self.read();
        (
            snap.accounts.len(),
            snap.refreshed_at
                .map(|at| now.saturating_duration_since(at)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nov() -> Month {
        "2026-11".parse().unwrap()
    }

    #[test]
    fn a_late_marker_of_the_previous_month_does_not_roll_the_view_back() {
        let view = MarkerView::new(Duration::from_secs(300));
        let dec: Month = "2026-12".parse().unwrap();
        let t0 = Instant::now();
        view.replace(dec, HashSet::from([7]), t0);
        view.insert(9, nov());
        assert_eq!(view.lookup(7, dec, t0), Lookup::Marked);
        assert_eq!(view.lookup(9, dec, t0), Lookup::Unmarked);
        assert!(!view.knows(9, nov()));
    }

    #[test]
    fn an_unfilled_view_is_stale() {
        let view = MarkerView::new(Duration::from_secs(300));
        assert_eq!(view.lookup(1, nov(), Instant::now()), Lookup::Stale);
    }

    #[test]
    fn a_listed_marker_is_marked_until_the_view_grows_too_old() {
        let view = MarkerView::new(Duration::from_secs(300));
        let t0 = Instant::now();
        view.replace(nov(), HashSet::from([7]), t0);
        assert_eq!(
            view.lookup(7, nov(), t0 + Duration::from_secs(300)),
            Lookup::Marked
        );
        assert_eq!(view.lookup(8, nov(), t0), Lookup::Unmarked);
        assert_eq!(
            view.lookup(7, nov(), t0 + Duration::from_secs(301)),
            Lookup::Stale
        );
    }

    #[test]
    fn markers_of_last_month_do_not_throttle_this_month() {
        let view = MarkerView::new(Duration::from_secs(300));
        let t0 = Instant::now();
        view.replace(nov(), HashSet::from([7]), t0);
        assert_eq!(view.lookup(7, nov().next(), t0), Lookup::Unmarked);
    }

    #[test]
    fn own_writes_and_deletes_apply_at_once() {
        let view = MarkerView::new(Duration::from_secs(300));
        let t0 = Instant::now();
        view.replace(nov(), HashSet::new(), t0);
        view.insert(9, nov());
        assert_eq!(view.lookup(9, nov(), t0), Lookup::Marked);
        view.remove(9);
        assert_eq!(view.lookup(9, nov(), t0), Lookup::Unmarked);
    }

    #[test]
    fn a_write_for_a_new_month_starts_that_months_set() {
        let view = MarkerView::new(Duration::from_secs(300));
        let t0 = Instant::now();
        view.replace(nov(), HashSet::from([1, 2]), t0);
        view.insert(3, nov().next());
        assert_eq!(view.lookup(3, nov().next(), t0), Lookup::Marked);
        assert_eq!(view.lookup(1, nov().next(), t0), Lookup::Unmarked);
    }

    #[test]
    fn a_lagging_listing_does_not_undo_this_replicas_own_changes() {
        let view = MarkerView::new(Duration::from_secs(300));
        let t0 = Instant::now();
        view.replace(nov(), HashSet::from([1]), t0);
        view.insert(2, nov());
        view.remove(1);
        // A listing that has not caught up yet still shows 1 and misses 2.
        view.replace(nov(), HashSet::from([1]), t0 + Duration::from_secs(10));
        assert_eq!(
            view.lookup(1, nov(), t0 + Duration::from_secs(10)),
            Lookup::Unmarked
        );
        assert_eq!(
            view.lookup(2, nov(), t0 + Duration::from_secs(10)),
            Lookup::Marked
        );
        // Long after, the listing is the truth again.
        let later = Instant::now() + OWN_CHANGES_TTL + Duration::from_secs(1);
        view.replace(nov(), HashSet::from([1]), later);
        assert_eq!(view.lookup(1, nov(), later), Lookup::Marked);
        assert_eq!(view.lookup(2, nov(), later), Lookup::Unmarked);
    }
}
