//! The pure rules of SPEC §4 and §6: which subscription is active, what a month and a
//! day allow, how credit is spent, and what a marker should become.
//!
//! Everything here is a function of its arguments (time included), so the edges —
//! the last millisecond of a month, a start instant, an expiry instant — are unit
//! tested without a clock or a database.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::month::Month;

pub use crate::plan::{Budget, Enforcement, FREE_PLAN, PlanTerms, RateLimit};

/// One row of `subscription`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Subscription {
    pub id: i64,
    pub account_id: i64,
    pub plan: String,
    pub monthly_allowance: i64,
    pub starts_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// A second cap per UTC day, or none.
    pub daily_allowance: Option<i64>,
    #[sqlx(try_from = "String")]
    pub enforcement: Enforcement,
    /// The features this subscription includes (SPEC §17).
    pub features: Vec<String>,
    /// Its rate limit (SPEC §16), stored as two columns; both null = none.
    pub rate_per_second: Option<i32>,
    pub rate_burst: Option<i32>,
    /// Its minute window, price and spend caps (SPEC §20).
    #[sqlx(flatten)]
    pub budget: Budget,
}

impl Subscription {
    /// The features and rate limit it was activated with.
    pub fn terms(&self) -> PlanTerms {
        PlanTerms {
            features: self.features.clone(),
            rate_limit: RateLimit::from_columns(self.rate_per_second, self.rate_burst),
            budget: self.budget,
        }
    }

    pub fn is_free(&self) -> bool {
        self.plan == FREE_PLAN
    }

    /// Validity is `[starts_at, expires_at)`.
    pub fn is_active_at(&self, at: DateTime<Utc>) -> bool {
        self.starts_at <= at && self.expires_at.is_none_or(|end| at < end)
    }

    /// Whether any instant of `month` falls inside the validity interval (an empty
    /// interval, a subscription cancelled before it began, overlaps nothing).
    pub fn overlaps(&self, month: Month) -> bool {
        self.starts_at < month.end()
            && self
                .expires_at
                .is_none_or(|end| end > month.start() && end > self.starts_at)
    }

    /// What a month of this subscription allows when no snapshot says otherwise.
    pub fn default_allowance(&self, free_monthly_calls: i64) -> i64 {
        if self.is_free() {
            free_monthly_calls
        } else {
            self.monthly_allowance
        }
    }
}

/// The active subscription at `at`: the latest-starting active non-free one (ties:
/// the newest id), else the free one. Expired subscriptions give nothing.
pub fn active_subscription(subs: &[Subscription], at: DateTime<Utc>) -> Option<&Subscription> {
    subs.iter()
        .filter(|s| !s.is_free() && s.is_active_at(at))
        .max_by_key(|s| (s.starts_at, s.id))
        .or_else(|| subs.iter().find(|s| s.is_free()))
}

/// `remaining = max(0, allowance - used)`.
pub fn remaining(allowance: i64, used: i64) -> i64 {
    (allowance - used).max(0)
}

/// An account's position in one month: the active plan, what it allows, what was used
/// (in units), the top-up credit left, and the day's window when the plan has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub account_id: i64,
    pub plan: String,
    pub enforcement: Enforcement,
    pub allowance: i64,
    pub used: i64,
    /// Top-up units left (valid at the instant judged).
    pub credits: i64,
    pub daily: Option<DailyStanding>,
    /// Units used this UTC day, whether or not the plan caps days (its spend does).
    pub day_used: i64,
    /// The active subscription's features and rate limit; `None` for the free grant,
    /// whose terms are the configuration's (`usage.free_features`, `free_rate_limit`).
    pub terms: Option<Arc<PlanTerms>>,
    /// The next instant at which another subscription may become the active one (one
    /// starts or ends), when it was read with the account's subscriptions: a replica's
    /// view reads the standing again then, so features and rate limits follow within a
    /// second of it.
    pub next_change: Option<DateTime<Utc>>,
}

/// Where an account stands in one UTC day of a plan with a daily allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DailyStanding {
    pub allowance: i64,
    pub used: i64,
}

impl DailyStanding {
    pub fn remaining(&self) -> i64 {
        remaining(self.allowance, self.used)
    }
}

impl Standing {
    /// `max(0, allowance - used) + credits`: once the allowance is used up, credit pays.
    pub fn remaining(&self) -> i64 {
        remaining(self.allowance, self.used).saturating_add(self.credits)
    }

    /// Nothing left this month, credit included.
    pub fn exhausted(&self) -> bool {
        self.remaining() == 0
    }

    /// The day's remaining units, when the plan caps days.
    pub fn daily_remaining(&self) -> Option<i64> {
        self.daily.map(|d| d.remaining())
    }

    /// The day's allowance is used up (the month may still have units).
    pub fn daily_exhausted(&self) -> bool {
        self.daily_remaining() == Some(0)
    }

    /// This standing as a refusal reports it: nothing left in the window refused (the
    /// day when `day` is set, else the month), whatever units the ledger has not yet
    /// counted (calls in flight, other replicas' reservations) would show; the quotas
    /// (`allowance + credits`, the day's allowance) stay as they are.
    pub fn refused(mut self, day: bool) -> Standing {
        match self.daily.as_mut() {
            Some(daily) if day => daily.used = daily.used.max(daily.allowance),
            _ => {
                self.allowance = self.allowance.saturating_add(self.credits);
                self.credits = 0;
                self.used = self.used.max(self.allowance);
            }
        }
        self
    }

    /// The active subscription's minute window, price and spend caps (none for the free
    /// grant).
    pub fn budget(&self) -> Budget {
        self.terms.as_ref().map(|t| t.budget).unwrap_or_default()
    }

    /// What the account may still use now: the smaller of the month and the day.
    pub fn available(&self) -> i64 {
        self.daily_remaining()
            .map_or(self.remaining(), |d| d.min(self.remaining()))
    }
}

/// The first instant after `at` at which any of `subs` starts or ends.
pub fn next_change(subs: &[Subscription], at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    subs.iter()
        .flat_map(|s| [Some(s.starts_at), s.expires_at])
        .flatten()
        .filter(|t| *t > at)
        .min()
}

/// The standing of an account on `sub` (its active subscription) from the figures
/// read or accounted: the month's allowance and units used, the credit valid now and
/// the units used today (which matter only when the plan caps days).
pub fn standing_of(
    sub: &Subscription,
    allowance: i64,
    used: i64,
    credits: i64,
    used_today: i64,
) -> Standing {
    Standing {
        account_id: sub.account_id,
        plan: sub.plan.clone(),
        enforcement: sub.enforcement,
        allowance,
        used,
        credits,
        daily: sub.daily_allowance.map(|allowance| DailyStanding {
            allowance,
            used: used_today,
        }),
        day_used: used_today,
        terms: (!sub.is_free()).then(|| Arc::new(sub.terms())),
        next_change: None,
    }
}

/// What the exhaustion marker of an account should become after its standing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerAction {
    /// Nothing left this month: mark the account.
    Exhaust,
    /// Allowance left, but a marker may be standing: remove it.
    Restore,
    /// Allowance left and no marker known: nothing to do.
    Keep,
}

/// The monthly marker rule of SPEC §4 and §6: a soft account with nothing left (credit
/// included) is marked; any other account is not (a hard account is refused before
/// admission, never throttled by hash). `maybe_marked` says whether a marker may exist
/// (this replica's view holds one, or the standing changed in a way no view has seen
/// yet, as an activation).
pub fn marker_action(standing: &Standing, maybe_marked: bool) -> MarkerAction {
    wanted(
        standing.enforcement == Enforcement::Soft && standing.exhausted(),
        maybe_marked,
    )
}

/// The daily marker rule: a soft account whose day is used up is marked for the day.
pub fn daily_marker_action(standing: &Standing, maybe_marked: bool) -> MarkerAction {
    wanted(
        standing.enforcement == Enforcement::Soft && standing.daily_exhausted(),
        maybe_marked,
    )
}

fn wanted(marked: bool, maybe_marked: bool) -> MarkerAction {
    if marked {
        MarkerAction::Exhaust
    } else if maybe_marked {
        MarkerAction::Restore
    } else {
        MarkerAction::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn sub(id: i64, plan: &str, allowance: i64, start: &str, end: Option<&str>) -> Subscription {
        Subscription {
            id,
            account_id: 1,
            plan: plan.into(),
            monthly_allowance: allowance,
            starts_at: at(start),
            expires_at: end.map(at),
            daily_allowance: None,
            enforcement: Enforcement::Soft,
            features: Vec::new(),
            rate_per_second: None,
            rate_burst: None,
            budget: Budget::default(),
        }
    }

    fn free() -> Subscription {
        sub(1, FREE_PLAN, 3000, "2026-01-01T00:00:00Z", None)
    }

    #[test]
    fn a_refusal_reports_nothing_left_in_the_window_it_refused() {
        let standing = Standing {
            terms: None,
            next_change: None,
            account_id: 1,
            plan: "metered".into(),
            enforcement: Enforcement::Hard,
            allowance: 5,
            used: 4,
            credits: 2,
            daily: Some(DailyStanding {
                allowance: 3,
                used: 2,
            }),
            day_used: 2,
        };
        let month = standing.clone().refused(false);
        assert_eq!(month.remaining(), 0);
        assert_eq!(month.allowance + month.credits, 7, "the quota is unchanged");
        assert_eq!(month.daily_remaining(), Some(1));
        let day = standing.refused(true);
        assert_eq!(day.daily_remaining(), Some(0));
        assert_eq!(day.daily.unwrap().allowance, 3);
        assert_eq!(day.remaining(), 3);
    }

    #[test]
    fn without_a_paid_subscription_the_free_one_is_active() {
        let subs = [free()];
        assert_eq!(
            active_subscription(&subs, at("2026-11-15T00:00:00Z"))
                .unwrap()
                .id,
            1
        );
    }

    #[test]
    fn a_subscription_is_active_from_its_start_instant_inclusive() {
        let subs = [
            free(),
            sub(
                2,
                "pro",
                50_000,
                "2026-11-10T00:00:00Z",
                Some("2026-12-10T00:00:00Z"),
            ),
        ];
        assert_eq!(
            active_subscription(&subs, at("2026-11-09T23:59:59.999Z"))
                .unwrap()
                .id,
            1
        );
        assert_eq!(
            active_subscription(&subs, at("2026-11-10T00:00:00Z"))
                .unwrap()
                .id,
            2
        );
    }

    #[test]
    fn a_subscription_is_gone_at_its_expiry_instant_and_free_takes_over() {
        let subs = [
            free(),
            sub(
                2,
                "pro",
                50_000,
                "2026-11-10T00:00:00Z",
                Some("2026-12-10T00:00:00Z"),
            ),
        ];
        assert_eq!(
            active_subscription(&subs, at("2026-12-09T23:59:59.999Z"))
                .unwrap()
                .id,
            2
        );
        assert_eq!(
            active_subscription(&subs, at("2026-12-10T00:00:00Z"))
                .unwrap()
                .id,
            1
        );
    }

    #[test]
    fn the_latest_starting_paid_subscription_wins() {
        let subs = [
            free(),
            sub(2, "pro", 50_000, "2026-11-01T00:00:00Z", None),
            sub(3, "basic", 10_000, "2026-10-01T00:00:00Z", None),
        ];
        assert_eq!(
            active_subscription(&subs, at("2026-11-15T00:00:00Z"))
                .unwrap()
                .id,
            2
        );
    }

    #[test]
    fn equal_starts_are_broken_by_the_newest_id() {
        let subs = [
            free(),
            sub(7, "pro", 50_000, "2026-11-01T00:00:00Z", None),
            sub(9, "max", 90_000, "2026-11-01T00:00:00Z", None),
            sub(8, "mid", 70_000, "2026-11-01T00:00:00Z", None),
        ];
        assert_eq!(
            active_subscription(&subs, at("2026-11-15T00:00:00Z"))
                .unwrap()
                .id,
            9
        );
    }

    #[test]
    fn an_account_without_any_subscription_has_none_active() {
        assert!(active_subscription(&[], at("2026-11-15T00:00:00Z")).is_none());
    }

    #[test]
    fn overlap_with_a_month_uses_the_half_open_interval() {
        let month: Month = "2026-11".parse().unwrap();
        let ends_at_start = sub(
            2,
            "pro",
            1,
            "2026-10-01T00:00:00Z",
            Some("2026-11-01T00:00:00Z"),
        );
        let starts_at_end = sub(3, "pro", 1, "2026-12-01T00:00:00Z", None);
        let last_ms = sub(4, "pro", 1, "2026-11-30T23:59:59.999Z", None);
        assert!(!ends_at_start.overlaps(month));
        assert!(!starts_at_end.overlaps(month));
        assert!(last_ms.overlaps(month));
    }

    #[test]
    fn a_subscription_cancelled_before_it_began_is_never_active_nor_overlaps() {
        let month: Month = "2026-11".parse().unwrap();
        let start = "2026-11-10T00:00:00Z";
        let withdrawn = sub(2, "pro", 1, start, Some(start));
        assert!(!withdrawn.overlaps(month));
        assert!(!withdrawn.is_active_at(at(start)));
        let subs = [free(), withdrawn];
        assert!(active_subscription(&subs, at(start)).unwrap().is_free());
    }

    #[test]
    fn remaining_never_goes_below_zero() {
        assert_eq!(remaining(3000, 10), 2990);
        assert_eq!(remaining(3000, 3000), 0);
        assert_eq!(remaining(3000, 3600), 0);
    }

    fn standing(allowance: i64, used: i64) -> Standing {
        Standing {
            terms: None,
            next_change: None,
            account_id: 1,
            plan: "pro".into(),
            enforcement: Enforcement::Soft,
            allowance,
            used,
            credits: 0,
            daily: None,
            day_used: 0,
        }
    }

    #[test]
    fn credit_counts_only_once_the_allowance_is_used_up() {
        let with_credit = Standing {
            credits: 5,
            ..standing(10, 4)
        };
        assert_eq!(with_credit.remaining(), 11);
        let spent = Standing {
            credits: 5,
            ..standing(10, 12)
        };
        assert_eq!(spent.remaining(), 5);
        assert!(!spent.exhausted());
        assert!(
            Standing {
                credits: 0,
                ..spent
            }
            .exhausted()
        );
    }

    #[test]
    fn the_last_unit_of_a_day_exhausts_the_day_not_the_month() {
        let day_done = Standing {
            daily: Some(DailyStanding {
                allowance: 100,
                used: 100,
            }),
            day_used: 100,
            ..standing(3000, 100)
        };
        assert!(day_done.daily_exhausted() && !day_done.exhausted());
        assert_eq!(day_done.available(), 0);
        assert_eq!(daily_marker_action(&day_done, false), MarkerAction::Exhaust);
        assert_eq!(marker_action(&day_done, false), MarkerAction::Keep);
        let one_left = Standing {
            daily: Some(DailyStanding {
                allowance: 100,
                used: 99,
            }),
            day_used: 99,
            ..day_done.clone()
        };
        assert_eq!(one_left.available(), 1);
        assert_eq!(daily_marker_action(&one_left, true), MarkerAction::Restore);
    }

    #[test]
    fn a_hard_plan_is_never_marked_and_loses_a_soft_marker() {
        let hard = Standing {
            enforcement: Enforcement::Hard,
            ..standing(10, 10)
        };
        assert_eq!(marker_action(&hard, false), MarkerAction::Keep);
        assert_eq!(marker_action(&hard, true), MarkerAction::Restore);
    }

    #[test]
    fn the_last_unit_of_a_month_exhausts_and_one_unit_left_does_not() {
        assert_eq!(
            marker_action(&standing(10, 10), false),
            MarkerAction::Exhaust
        );
        assert_eq!(
            marker_action(&standing(10, 11), true),
            MarkerAction::Exhaust
        );
        assert_eq!(marker_action(&standing(10, 9), false), MarkerAction::Keep);
    }

    #[test]
    fn allowance_left_removes_a_marker_that_may_stand() {
        assert_eq!(marker_action(&standing(10, 9), true), MarkerAction::Restore);
        assert_eq!(marker_action(&standing(0, 0), true), MarkerAction::Exhaust);
    }

    #[test]
    fn an_upgrade_mid_month_turns_an_exhausted_standing_into_a_restore() {
        let before = standing(3000, 3000);
        let after = Standing {
            allowance: 10_000,
            ..before.clone()
        };
        assert_eq!(marker_action(&before, true), MarkerAction::Exhaust);
        assert_eq!(after.remaining(), 7000);
        assert_eq!(marker_action(&after, true), MarkerAction::Restore);
    }

    #[test]
    fn free_allowance_follows_the_configured_grant() {
        assert_eq!(free().default_allowance(500), 500);
        let paid = sub(2, "pro", 50_000, "2026-11-01T00:00:00Z", None);
        assert_eq!(paid.default_allowance(500), 50_000);
    }
}
