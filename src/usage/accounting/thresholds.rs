//! The threshold rule of SPEC §7: which `notify.thresholds` percentages of a month's
//! allowance an account's `used` crossed while one batch was accounted.
//!
//! A threshold `t` is crossed when accounting moves `used` from below `t` % of the
//! allowance to at or above it: `before × 100 < allowance × t ≤ after × 100`, in
//! integers. Credits are not part of the allowance. A month whose allowance is 0 has
//! nothing to cross. A call that jumps over several thresholds crosses each of them.
//! Pure: the batch's calls and the figures are arguments, so every edge is unit tested.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::event::UsageEvent;
use crate::month::Month;
use crate::notify::outbox::NewEvent;

/// One threshold crossed, and the call that crossed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossing {
    /// The percentage crossed.
    pub threshold: u8,
    /// `used` right after the crossing call.
    pub used: i64,
    /// The crossing call's time.
    pub occurred_at: DateTime<Utc>,
}

/// Whether `used` is at or above `threshold` % of `allowance`.
fn reached(threshold: u8, allowance: i64, used: i64) -> bool {
    i128::from(used) * 100 >= i128::from(allowance) * i128::from(threshold)
}

/// Whether going from `before` to `after` crosses any of `thresholds` (the cheap check
/// made for every account and month of a batch).
pub fn any_crossed(thresholds: &[u8], allowance: i64, before: i64, after: i64) -> bool {
    allowance > 0
        && thresholds
            .iter()
            .any(|t| !reached(*t, allowance, before) && reached(*t, allowance, after))
}

/// The thresholds crossed when `calls` (`(occurred_at, cost)`, in any order) are added
/// to `before`, each with the call that crossed it. Calls are taken in time order;
/// `thresholds` ascending or not, the crossings come out by time, then threshold.
pub fn crossings(
    thresholds: &[u8],
    allowance: i64,
    before: i64,
    calls: &[(DateTime<Utc>, i64)],
) -> Vec<Crossing> {
    if allowance <= 0 {
        return Vec::new();
    }
    let mut ordered = calls.to_vec();
    ordered.sort_by_key(|(at, _)| *at);
    let mut sorted = thresholds.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut found = Vec::new();
    let mut used = before;
    for (occurred_at, cost) in ordered {
        let was = used;
        used += cost;
        for t in &sorted {
            if !reached(*t, allowance, was) && reached(*t, allowance, used) {
                found.push(Crossing {
                    threshold: *t,
                    used,
                    occurred_at,
                });
            }
        }
    }
    found
}

/// The outbox events of one accounted batch: for each account and month it added
/// `added` units to (`per_month`), with `used` after it and the month's allowance,
/// the thresholds crossed, each with its crossing call among `accounted`.
pub fn batch_events(
    thresholds: &[u8],
    per_month: &BTreeMap<(i64, Month), i64>,
    used: &HashMap<(i64, Month), i64>,
    allowance_in: impl Fn(i64, Month) -> Option<i64>,
    accounted: &[&UsageEvent],
) -> Vec<NewEvent> {
    let mut events = Vec::new();
    for (&(account_id, month), &added) in per_month {
        let Some(allowance) = allowance_in(account_id, month) else {
            continue;
        };
        let after = used.get(&(account_id, month)).copied().unwrap_or(added);
        let before = after - added;
        if !any_crossed(thresholds, allowance, before, after) {
            continue;
        }
        let calls: Vec<(DateTime<Utc>, i64)> = accounted
            .iter()
            .filter(|e| e.account_id == account_id && month.contains(e.occurred_at))
            .map(|e| (e.occurred_at, e.cost))
            .collect();
        events.extend(
            crossings(thresholds, allowance, before, &calls)
                .into_iter()
                .map(|c| NewEvent {
                    account_id,
                    month_start: month.start(),
                    threshold: c.threshold,
                    used: c.used,
                    allowance,
                    occurred_at: c.occurred_at,
                }),
        );
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &[u8] = &[80, 100];

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn calls(costs: &[i64]) -> Vec<(DateTime<Utc>, i64)> {
        let start = at("2026-11-20T12:00:00Z");
        costs
            .iter()
            .enumerate()
            .map(|(i, c)| (start + chrono::Duration::seconds(i as i64), *c))
            .collect()
    }

    fn crossed(allowance: i64, before: i64, costs: &[i64]) -> Vec<(u8, i64)> {
        crossings(DEFAULT, allowance, before, &calls(costs))
            .into_iter()
            .map(|c| (c.threshold, c.used))
            .collect()
    }

    #[test]
    fn reaching_exactly_the_threshold_crosses_it() {
        assert_eq!(crossed(10, 7, &[1]), [(80, 8)]);
        assert_eq!(crossed(10, 9, &[1]), [(100, 10)]);
        assert!(any_crossed(DEFAULT, 10, 7, 8));
    }

    #[test]
    fn staying_below_or_starting_above_crosses_nothing() {
        assert_eq!(crossed(10, 6, &[1]), []);
        assert_eq!(crossed(10, 8, &[1]), []);
        assert_eq!(crossed(10, 10, &[5]), []);
        assert!(!any_crossed(DEFAULT, 10, 8, 9));
        assert!(!any_crossed(DEFAULT, 10, 12, 30));
    }

    #[test]
    fn one_priced_call_over_several_thresholds_crosses_each() {
        assert_eq!(crossed(10, 0, &[25]), [(80, 25), (100, 25)]);
        let with_more = crossings(&[50, 80, 100], 10, 4, &calls(&[7]));
        assert_eq!(
            with_more.iter().map(|c| c.threshold).collect::<Vec<_>>(),
            [50, 80, 100]
        );
    }

    #[test]
    fn each_threshold_names_the_call_that_crossed_it() {
        let found = crossings(DEFAULT, 10, 6, &calls(&[1, 1, 1, 1, 1]));
        let start = at("2026-11-20T12:00:00Z");
        assert_eq!(
            found,
            [
                Crossing {
                    threshold: 80,
                    used: 8,
                    occurred_at: start + chrono::Duration::seconds(1),
                },
                Crossing {
                    threshold: 100,
                    used: 10,
                    occurred_at: start + chrono::Duration::seconds(3),
                },
            ]
        );
    }

    #[test]
    fn calls_are_taken_in_time_order_whatever_order_they_come_in() {
        let mut reversed = calls(&[1, 5]);
        reversed.reverse();
        let found = crossings(DEFAULT, 10, 2, &reversed);
        // 2 + 1 = 3 (the earlier call), then + 5 = 8.
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].threshold, found[0].used), (80, 8));
        assert_eq!(found[0].occurred_at, at("2026-11-20T12:00:01Z"));
    }

    #[test]
    fn percentages_are_exact_without_rounding() {
        // 80 % of 3 is 2.4: 2 is below, 3 is at or above.
        assert_eq!(crossed(3, 1, &[1]), []);
        assert_eq!(crossed(3, 2, &[1]), [(80, 3), (100, 3)]);
        // 1 % of 3,000 is 30.
        assert_eq!(crossings(&[1], 3_000, 29, &calls(&[1]))[0].used, 30);
        assert!(!any_crossed(&[1], 3_000, 0, 29));
        // Huge figures do not overflow.
        assert!(any_crossed(DEFAULT, i64::MAX, 0, i64::MAX));
    }

    #[test]
    fn a_month_without_allowance_has_nothing_to_cross() {
        assert_eq!(crossed(0, 0, &[1, 1]), []);
        assert!(!any_crossed(DEFAULT, 0, 0, 5));
    }

    #[test]
    fn free_calls_move_nothing() {
        assert_eq!(crossed(10, 7, &[0, 0]), []);
    }

    #[test]
    fn thresholds_given_unsorted_come_out_in_order() {
        let found = crossings(&[100, 80], 10, 0, &calls(&[10]));
        let order: Vec<u8> = found.iter().map(|c| c.threshold).collect();
        assert_eq!(order, [80, 100]);
    }
}
