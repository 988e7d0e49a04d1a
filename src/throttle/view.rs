//! The local view of the current month's (and day's) exhaustion markers.
//!
//! Admission reads only this view, never KV nor PostgreSQL. It follows the fleet's
//! `fleet_marker` table: loaded whole when the replica (re)connects to its notifications,
//! then patched by each notification ([`MarkerView::apply`]), and patched at once by this
//! replica's own writes and deletes, which also outlive a reload for [`OWN_CHANGES_TTL`]
//! or until the table's own notification of them arrives (a command still queued on the
//! worker has not reached the table yet).
//!
//! The view is as fresh as the fleet's last good KV listing ([`MarkerView::listed`]): a
//! view whose last listing is older than the staleness bound (stretched to two listing
//! intervals when the budget spaces listings further apart), or of another month, is
//! treated as empty: the gateway fails open rather than throttle on old news.
//!
//! Admission reads the view on every call, so reading takes no lock: the view is an
//! immutable snapshot swapped whole ([`ArcSwap`]). Changes (notifications, listings,
//! this replica's own writes) are rare; each copies the snapshot, one writer at a time.

use std::collections::{HashMap, HashSet};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use chrono::DateTime;

use super::fleet::MarkerKind;
use crate::month::{Day, Month};

/// How long this replica's own marker writes and deletes override a reload of the table.
pub const OWN_CHANGES_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
struct Snapshot {
    month: Option<Month>,
    accounts: HashSet<i64>,
    /// When the store was last listed successfully.
    refreshed_at: Option<Instant>,
    /// The interval the fleet's lister planned at its last listing.
    listing_interval: Duration,
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

/// Shared, read-mostly marker set. The writers' lock is never held across an `.await`.
#[derive(Debug)]
pub struct MarkerView {
    inner: ArcSwap<Snapshot>,
    /// One writer at a time, so no change is lost between a copy and its swap.
    writing: Mutex<()>,
    max_staleness: Duration,
}

/// A copy of the snapshot being changed; swapped in when dropped.
struct Writing<'a> {
    view: &'a MarkerView,
    snap: Option<Snapshot>,
    _lock: MutexGuard<'a, ()>,
}

impl Deref for Writing<'_> {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        self.snap.as_ref().expect("present until dropped")
    }
}

impl DerefMut for Writing<'_> {
    fn deref_mut(&mut self) -> &mut Snapshot {
        self.snap.as_mut().expect("present until dropped")
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if let Some(snap) = self.snap.take() {
            self.view.inner.store(Arc::new(snap));
        }
    }
}

impl MarkerView {
    pub fn new(max_staleness: Duration) -> Self {
        Self {
            writing: Mutex::new(()),
            inner: ArcSwap::from_pointee(Snapshot {
                month: None,
                accounts: HashSet::new(),
                refreshed_at: None,
                listing_interval: Duration::ZERO,
                own: HashMap::new(),
                day: None,
                day_accounts: HashSet::new(),
            }),
            max_staleness,
        }
    }

    fn read(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.inner.load()
    }

    fn write(&self) -> Writing<'_> {
        let lock = crate::sync::lock(&self.writing);
        Writing {
            view: self,
            snap: Some(Snapshot::clone(&self.inner.load())),
            _lock: lock,
        }
    }

    /// Whether `account_id` is marked in `month`, and whether it has a daily marker for
    /// `day`, as of `now`: [`MarkerView::lookup`] and [`MarkerView::day_marked`] from
    /// one read of the view.
    pub fn lookup_both(
        &self,
        account_id: i64,
        month: Month,
        day: Day,
        now: Instant,
    ) -> (Lookup, bool) {
        let snap = self.read();
        (
            self.lookup_in(&snap, account_id, month, now),
            snap.day == Some(day) && snap.day_accounts.contains(&account_id),
        )
    }

    /// Whether `account_id` is marked in `month`, as of `now`.
    pub fn lookup(&self, account_id: i64, month: Month, now: Instant) -> Lookup {
        self.lookup_in(&self.read(), account_id, month, now)
    }

    fn lookup_in(&self, snap: &Snapshot, account_id: i64, month: Month, now: Instant) -> Lookup {
        let trusted_for = self.max_staleness.max(snap.listing_interval * 2);
        let fresh = snap
            .refreshed_at
            .is_some_and(|at| now.saturating_duration_since(at) <= trusted_for);
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
    pub fn replace(&self, month: Month, accounts: HashSet<i64>, at: Instant) {
        let mut snap = self.write();
        set_month(&mut snap, month, accounts, at);
        snap.refreshed_at = Some(at);
    }

    /// Replaces the markers with the fleet's table as read at `at` (this replica's
    /// recent changes still apply on top); freshness is [`MarkerView::listed`]'s.
    pub fn load(
        &self,
        (month, accounts): (Month, HashSet<i64>),
        (day, day_accounts): (Day, HashSet<i64>),
        at: Instant,
    ) {
        let mut snap = self.write();
        set_month(&mut snap, month, accounts, at);
        snap.day = Some(day);
        snap.day_accounts = day_accounts;
    }

    /// The fleet listed KV successfully at `at` and plans the next listing `interval`
    /// later: the view is fresh from `at` on.
    pub fn listed(&self, at: Instant, interval: Duration) {
        let mut snap = self.write();
        if snap.refreshed_at.is_none_or(|previous| previous <= at) {
            snap.refreshed_at = Some(at);
        }
        snap.listing_interval = interval;
    }

    /// Applies one change of the fleet's table (a notification, in commit order): the
    /// newest word on the account, so it also ends this replica's own override of it.
    /// Markers of a period older than the view's are ignored; a marker of a newer one
    /// starts that period's set.
    pub fn apply(&self, kind: MarkerKind, account_id: i64, period_start_unix: i64, marked: bool) {
        let Some(start) = DateTime::from_timestamp(period_start_unix, 0) else {
            return;
        };
        let mut snap = self.write();
        match kind {
            MarkerKind::Month => {
                let month = Month::containing(start);
                if month.start_unix() != period_start_unix {
                    return;
                }
                snap.own.remove(&account_id);
                match snap.month {
                    Some(current) if month < current => {}
                    Some(current) if month == current => {
                        if marked {
                            snap.accounts.insert(account_id);
                        } else {
                            snap.accounts.remove(&account_id);
                        }
                    }
                    _ if marked => {
                        snap.month = Some(month);
                        snap.accounts = HashSet::from([account_id]);
                    }
                    _ => {}
                }
            }
            MarkerKind::Day => {
                let day = Day::containing(start);
                if day.start_unix() != period_start_unix {
                    return;
                }
                match snap.day {
                    Some(current) if day < current => {}
                    Some(current) if day == current => {
                        if marked {
                            snap.day_accounts.insert(account_id);
                        } else {
                            snap.day_accounts.remove(&account_id);
                        }
                    }
                    _ if marked => {
                        snap.day = Some(day);
                        snap.day_accounts = HashSet::from([account_id]);
                    }
                    _ => {}
                }
            }
        }
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

/// Sets the month's markers read at `at`, with this replica's changes of the last
/// [`OWN_CHANGES_TTL`] on top.
fn set_month(snap: &mut Snapshot, month: Month, mut accounts: HashSet<i64>, at: Instant) {
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

    #[test]
    fn fleet_changes_apply_in_order_and_end_this_replicas_override() {
        let view = MarkerView::new(Duration::from_secs(300));
        let t0 = Instant::now();
        view.replace(nov(), HashSet::new(), t0);
        let nov_start = nov().start_unix();
        view.apply(MarkerKind::Month, 7, nov_start, true);
        assert_eq!(view.lookup(7, nov(), t0), Lookup::Marked);
        view.remove(7);
        // The table's own word on 7 (e.g. another replica's later exhaustion) wins, and a
        // reload then follows the table, not this replica's older delete.
        view.apply(MarkerKind::Month, 7, nov_start, true);
        view.load(
            (nov(), HashSet::from([7])),
            (Day::containing(nov().start()), HashSet::new()),
            t0,
        );
        assert_eq!(view.lookup(7, nov(), t0), Lookup::Marked);
        view.apply(MarkerKind::Month, 7, nov_start, false);
        assert_eq!(view.lookup(7, nov(), t0), Lookup::Unmarked);
    }

    #[test]
    fn a_fleet_marker_of_another_period_is_ignored_or_starts_the_new_one() {
        let view = MarkerView::new(Duration::from_secs(300));
        let t0 = Instant::now();
        let dec = nov().next();
        view.replace(dec, HashSet::from([1]), t0);
        view.apply(MarkerKind::Month, 2, nov().start_unix(), true);
        view.apply(MarkerKind::Month, 3, nov().start_unix() + 1, true);
        assert_eq!(view.lookup(2, dec, t0), Lookup::Unmarked);
        assert_eq!(view.lookup(3, dec, t0), Lookup::Unmarked);
        let jan = dec.next();
        view.apply(MarkerKind::Month, 4, jan.start_unix(), true);
        assert_eq!(view.lookup(4, jan, t0), Lookup::Marked);
        assert_eq!(view.lookup(1, jan, t0), Lookup::Unmarked);

        let day = Day::containing(jan.start());
        view.apply(MarkerKind::Day, 5, day.start_unix(), true);
        assert!(view.day_marked(5, day));
        view.apply(MarkerKind::Day, 5, day.start_unix(), false);
        assert!(!view.day_marked(5, day));
    }

    #[test]
    fn a_loaded_view_is_fresh_only_after_a_listing_and_for_two_listing_intervals() {
        let view = MarkerView::new(Duration::from_secs(10));
        let t0 = Instant::now();
        view.load(
            (nov(), HashSet::from([7])),
            (Day::containing(nov().start()), HashSet::new()),
            t0,
        );
        assert_eq!(view.lookup(7, nov(), t0), Lookup::Stale);
        view.listed(t0, Duration::from_secs(60));
        assert_eq!(
            view.lookup(7, nov(), t0 + Duration::from_secs(120)),
            Lookup::Marked
        );
        assert_eq!(
            view.lookup(7, nov(), t0 + Duration::from_secs(121)),
            Lookup::Stale
        );
        view.listed(t0, Duration::from_secs(1));
        assert_eq!(
            view.lookup(7, nov(), t0 + Duration::from_secs(10)),
            Lookup::Marked
        );
        assert_eq!(
            view.lookup(7, nov(), t0 + Duration::from_secs(11)),
            Lookup::Stale
        );
    }
}
