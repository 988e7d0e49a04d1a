//! The pure rules of spending units (SPEC §6): top-up credit pays what falls beyond
//! the month's allowance, earliest expiry first; a hard plan's replicas reserve units in
//! blocks that shrink as the allowance runs out.

use chrono::{DateTime, Utc};

/// Units of a batch that fall beyond the month's allowance, to be paid from credit:
/// those that took `used` past `allowance`, and none that were already within it.
pub fn beyond_allowance(allowance: i64, used_before: i64, used_after: i64) -> i64 {
    let over = |used: i64| (used - allowance).max(0);
    over(used_after) - over(used_before)
}

/// One top-up grant, as spending sees it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Credit {
    pub id: i64,
    pub account_id: i64,
    pub remaining: i64,
    pub expires_at: Option<DateTime<Utc>>,
}

impl Credit {
    pub fn is_valid_at(&self, at: DateTime<Utc>) -> bool {
        self.expires_at.is_none_or(|end| at < end)
    }
}

/// Units of credit valid at `at`.
pub fn credits_at(credits: &[Credit], at: DateTime<Utc>) -> i64 {
    credits
        .iter()
        .filter(|c| c.is_valid_at(at))
        .map(|c| c.remaining)
        .sum()
}

/// How `units` are paid from `credits` valid at `at`: earliest expiry first (grants
/// that never expire last, then the oldest grant), as `(grant id, units taken)`. What
/// credit cannot cover stays unpaid (soft plans record it beyond the allowance).
pub fn spend_credits(credits: &[Credit], units: i64, at: DateTime<Utc>) -> Vec<(i64, i64)> {
    let mut valid: Vec<&Credit> = credits
        .iter()
        .filter(|c| c.is_valid_at(at) && c.remaining > 0)
        .collect();
    valid.sort_by_key(|c| (c.expires_at.is_none(), c.expires_at, c.id));
    let mut left = units.max(0);
    let mut taken = Vec::new();
    for c in valid {
        if left == 0 {
            break;
        }
        let take = left.min(c.remaining);
        taken.push((c.id, take));
        left -= take;
    }
    taken
}

/// Largest block of units one replica reserves at once.
pub const MAX_RESERVATION_BLOCK: i64 = 1_000;

/// Units a replica reserves for a hard plan when it needs `cost` and the account has
/// `available` units not yet used or reserved: a quarter of what is left (so the last
/// units are shared out in ever smaller blocks and none sit on an idle replica), at
/// least the call's cost (and one unit), at most [`MAX_RESERVATION_BLOCK`]; 0 when the
/// call does not fit, or nothing is left at all (even a free call is refused then).
pub fn reservation_block(available: i64, cost: i64) -> i64 {
    if available <= 0 || cost > available {
        return 0;
    }
    (available / 4).min(MAX_RESERVATION_BLOCK).max(cost).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn credit(id: i64, remaining: i64, expires: Option<&str>) -> Credit {
        Credit {
            id,
            account_id: 1,
            remaining,
            expires_at: expires.map(at),
        }
    }

    #[test]
    fn a_priced_call_crossing_the_allowance_pays_only_its_excess_from_credit() {
        assert_eq!(beyond_allowance(100, 95, 105), 5);
        assert_eq!(beyond_allowance(100, 90, 100), 0);
        assert_eq!(beyond_allowance(100, 100, 107), 7);
        assert_eq!(beyond_allowance(100, 120, 125), 5);
    }

    #[test]
    fn credit_is_spent_earliest_expiry_first_and_never_expiring_last() {
        let now = at("2026-11-15T00:00:00Z");
        let credits = [
            credit(1, 10, None),
            credit(2, 3, Some("2026-12-01T00:00:00Z")),
            credit(3, 4, Some("2026-11-20T00:00:00Z")),
            credit(4, 50, Some("2026-11-15T00:00:00Z")),
        ];
        assert_eq!(credits_at(&credits, now), 17);
        assert_eq!(
            spend_credits(&credits, 9, now),
            vec![(3, 4), (2, 3), (1, 2)]
        );
        assert_eq!(
            spend_credits(&credits, 40, now),
            vec![(3, 4), (2, 3), (1, 10)]
        );
    }

    #[test]
    fn credit_expiring_mid_month_stops_counting_at_its_expiry_instant() {
        let credits = [credit(1, 10, Some("2026-11-20T00:00:00Z"))];
        assert_eq!(credits_at(&credits, at("2026-11-19T23:59:59.999Z")), 10);
        assert_eq!(credits_at(&credits, at("2026-11-20T00:00:00Z")), 0);
        assert!(spend_credits(&credits, 1, at("2026-11-20T00:00:00Z")).is_empty());
    }

    #[test]
    fn reservation_blocks_shrink_as_the_allowance_runs_out() {
        assert_eq!(reservation_block(100_000, 1), MAX_RESERVATION_BLOCK);
        assert_eq!(reservation_block(400, 1), 100);
        assert_eq!(reservation_block(3, 1), 1);
        assert_eq!(reservation_block(3, 3), 3);
        assert_eq!(reservation_block(2, 3), 0);
        assert_eq!(reservation_block(0, 1), 0);
        assert_eq!(reservation_block(0, 0), 0);
        assert_eq!(reservation_block(3, 0), 1);
    }
}
