//! The windows that refuse a call (SPEC §6, §20): a hard plan's month and day, and the
//! spend caps whatever the enforcement; which of them a call meets, and when its wall
//! falls. Pure functions of a standing and the units other replicas hold.

use chrono::{DateTime, Utc};

use crate::month::{Day, Month};
use crate::usage::rules::{Enforcement, Standing};

/// What kind of window refused a call: its units (`429 QUOTA_EXCEEDED`) or its money
/// (`429 SPEND_CAP_REACHED`, SPEC §20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wall {
    Quota,
    SpendCap,
}

/// One window a call is judged in: units left in it (after what other replicas hold)
/// and where it ends.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) left: i64,
    pub(super) ends: DateTime<Utc>,
    pub(super) wall: Wall,
    /// The day's units (a hard plan's daily allowance), for the refusal's headers.
    pub(super) daily: bool,
}

/// The windows that refuse `standing`'s calls, given the units other replicas hold
/// (`month_out`, `day_out`): a hard plan's month (credits included) and day, and the
/// spend caps whatever the enforcement.
pub(super) fn refusing_windows(
    standing: &Standing,
    month_out: i64,
    day_out: i64,
    now: DateTime<Utc>,
) -> Vec<Window> {
    let (month, day) = (Month::containing(now), Day::containing(now));
    let mut windows = Vec::new();
    if standing.enforcement == Enforcement::Hard {
        windows.push(Window {
            left: standing.remaining() - month_out,
            ends: month.end(),
            wall: Wall::Quota,
            daily: false,
        });
        if let Some(day_left) = standing.daily_remaining() {
            windows.push(Window {
                left: day_left - day_out,
                ends: day.end(),
                wall: Wall::Quota,
                daily: true,
            });
        }
    }
    let budget = standing.budget();
    if let Some(units) = budget.day_cap_units() {
        windows.push(Window {
            left: units - standing.day_used - day_out,
            ends: day.end(),
            wall: Wall::SpendCap,
            daily: false,
        });
    }
    if let Some(units) = budget.month_cap_units() {
        windows.push(Window {
            left: units - standing.used - month_out,
            ends: month.end(),
            wall: Wall::SpendCap,
            daily: false,
        });
    }
    windows
}

/// The latest wall among `windows` that a call of `cost` does not fit in: when it is
/// reached, what code refuses, and whether it is a daily allowance. Ties go to the units'
/// window. `None` when the call fits everywhere.
pub(super) fn latest_wall(windows: &[Window], cost: i64) -> Option<Window> {
    windows
        .iter()
        .filter(|w| w.left <= 0 || cost > w.left)
        .max_by_key(|w| (w.ends, w.wall == Wall::Quota, w.daily))
        .copied()
}

/// The wall a call would meet now from what this replica knows of the account (no
/// reservation taken): for the `Retry-After` of a call another window refused first.
pub fn known_wall(standing: &Standing, now: DateTime<Utc>) -> Option<(DateTime<Utc>, Wall)> {
    latest_wall(&refusing_windows(standing, 0, 0, now), 1).map(|w| (w.ends, w.wall))
}

/// Whether an account's calls spend reserved units: a hard plan's, and any plan with a
/// spend cap (SPEC §6, §20). Soft plans without caps are judged by the admission hash.
pub(super) fn reserves(standing: &Standing) -> bool {
    standing.enforcement == Enforcement::Hard || standing.budget().has_caps()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_used_up_wall_decides_and_ties_go_to_units() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let window = |left, ends, wall| Window {
            left,
            ends: at(ends),
            wall,
            daily: false,
        };
        let day = window(0, "2026-12-09T00:00:00Z", Wall::SpendCap);
        let month = window(5, "2027-01-01T00:00:00Z", Wall::Quota);
        assert_eq!(
            latest_wall(&[day, month], 1).map(|w| w.wall),
            Some(Wall::SpendCap)
        );
        assert_eq!(
            latest_wall(&[day, month], 6).map(|w| w.wall),
            Some(Wall::Quota)
        );
        assert!(
            latest_wall(&[month], 5).is_none(),
            "a call that fits passes"
        );
        let cap = window(0, "2027-01-01T00:00:00Z", Wall::SpendCap);
        let units = window(0, "2027-01-01T00:00:00Z", Wall::Quota);
        assert_eq!(
            latest_wall(&[cap, units], 1).map(|w| w.wall),
            Some(Wall::Quota)
        );
    }
}
