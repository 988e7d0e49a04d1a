//! Rate limits per second (SPEC §16): a bucket per account and per key, kept in this
//! replica's memory, so a call costs no round trip.
//!
//! Each bucket is a GCRA cell (the "virtual scheduling" form of the generic cell rate
//! algorithm): one atomic *theoretical arrival time*, moved forward by one emission
//! interval per admitted call, with room for `burst` calls ahead of now. A call must
//! pass both its key's bucket and its account's; both are judged first and spent only
//! when both admit, so a call one limit refuses takes nothing from the other (a
//! single-bucket crate would have to spend the first before asking the second).
//!
//! Across the fleet each replica enforces its share: `per_second / n` and
//! `burst / n` (at least one call), where `n` is the number of live replicas
//! [`super::presence`] counts. With calls spread evenly over the replicas the fleet
//! admits the configured rate; a replica that joins is counted by the others within a
//! heartbeat, and one that stops (or dies) stops being counted within
//! [`super::presence::LIVE_WITHIN`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::plan::RateLimit;

/// Buckets held at most; past it, full buckets (which hold no state worth keeping) go.
const MAX_BUCKETS: usize = 200_000;
/// Shards of the buckets' map.
const SHARDS: usize = 64;

/// Whose bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    Account(i64),
    Key(i64),
}

/// A call that passed: what the `"burst"` quota-header item says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Burst {
    /// The tighter limit's configured burst (the policy's `q`).
    pub burst: u32,
    /// Calls that would pass now, after this one.
    pub remaining: u32,
    /// Whole seconds until the bucket is full again.
    pub full_in: u64,
}

/// A call over a limit: seconds until a call would pass (at least 1), and the burst
/// item of the limit that refused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub retry_after: u64,
    pub burst: Burst,
}

/// This replica's buckets. Cheap to clone.
#[derive(Clone)]
pub struct RateLimits {
    inner: Arc<Inner>,
}

struct Inner {
    buckets: DashMap<Subject, Bucket>,
    /// Live replicas sharing the limits (at least 1).
    replicas: AtomicU32,
    epoch: Instant,
}

struct Bucket {
    /// Nanoseconds after `epoch` at which the bucket is full again.
    tat: AtomicU64,
    limit: RateLimit,
    replicas: u32,
}

/// One bucket's judgement, before anything is spent.
struct Judged {
    /// The new arrival time if the call is admitted.
    tat: u64,
    /// The arrival time it was judged against (for the compare-and-swap).
    seen: u64,
    interval: u64,
    window: u64,
    limit: RateLimit,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl RateLimits {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                buckets: DashMap::with_shard_amount(SHARDS),
                replicas: AtomicU32::new(1),
                epoch: Instant::now(),
            }),
        }
    }

    /// Sets how many replicas share each limit (clamped to at least 1).
    pub fn set_replicas(&self, replicas: u32) {
        self.inner
            .replicas
            .store(replicas.max(1), Ordering::Relaxed);
    }

    pub fn replicas(&self) -> u32 {
        self.inner.replicas.load(Ordering::Relaxed)
    }

    /// Admits a call under both limits (either may be absent), spending from both, or
    /// refuses it, spending from neither. `Ok(None)` when no limit applies.
    pub fn check(
        &self,
        account: Option<(i64, RateLimit)>,
        key: Option<(i64, RateLimit)>,
    ) -> Result<Option<Burst>, Refused> {
        if account.is_none() && key.is_none() {
            return Ok(None);
        }
        self.check_at(account, key, self.inner.now())
    }

    fn check_at(
        &self,
        account: Option<(i64, RateLimit)>,
        key: Option<(i64, RateLimit)>,
        now: u64,
    ) -> Result<Option<Burst>, Refused> {
        let replicas = self.replicas();
        let subjects = [
            account.map(|(id, l)| (Subject::Account(id), l)),
            key.map(|(id, l)| (Subject::Key(id), l)),
        ];
        if self.inner.buckets.len() >= MAX_BUCKETS {
            self.prune(now);
        }
        for (subject, limit) in subjects.iter().flatten() {
            let fresh = self
                .inner
                .buckets
                .get(subject)
                .is_some_and(|b| b.limit == *limit && b.replicas == replicas);
            if !fresh {
                // A new bucket, or one whose limit or share changed: its arrival time
                // carries over, so a change never hands out a fresh burst.
                let tat = self
                    .inner
                    .buckets
                    .get(subject)
                    .map_or(0, |b| b.tat.load(Ordering::Acquire));
                self.inner.buckets.insert(
                    *subject,
                    Bucket {
                        tat: AtomicU64::new(tat),
                        limit: *limit,
                        replicas,
                    },
                );
            }
        }
        loop {
            let mut judged: [Option<Judged>; 2] = [None, None];
            for (slot, (subject, _)) in judged
                .iter_mut()
                .zip(subjects.iter())
                .filter_map(|(slot, s)| s.as_ref().map(|s| (slot, s)))
            {
                let Some(bucket) = self.inner.buckets.get(subject) else {
                    continue;
                };
                let j = bucket.judge(now);
                if j.tat - now > j.window {
                    let wait = j.tat - now - j.window;
                    return Err(Refused {
                        retry_after: Duration::from_nanos(wait).as_secs_f64().ceil().max(1.0)
                            as u64,
                        burst: Burst {
                            burst: j.limit.burst,
                            remaining: 0,
                            full_in: Duration::from_nanos(j.seen.max(now) - now)
                                .as_secs_f64()
                                .ceil() as u64,
                        },
                    });
                }
                *slot = Some(j);
            }
            // Spend from both; if another call moved a bucket meanwhile, judge again.
            let mut spent: Option<Subject> = None;
            let mut raced = false;
            for (j, (subject, _)) in judged
                .iter()
                .zip(subjects.iter())
                .filter_map(|(j, s)| Some((j.as_ref()?, s.as_ref()?)))
            {
                let Some(bucket) = self.inner.buckets.get(subject) else {
                    continue;
                };
                if bucket
                    .tat
                    .compare_exchange(j.seen, j.tat, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    spent = Some(*subject);
                } else {
                    raced = true;
                    break;
                }
            }
            if raced {
                // Give back the one interval this attempt took from the first bucket;
                // what others took since stays taken.
                if let Some(bucket) = spent.and_then(|s| self.inner.buckets.get(&s)) {
                    bucket.tat.fetch_sub(bucket.interval(), Ordering::AcqRel);
                }
                continue;
            }
            // The tighter bucket (fewest calls left) is the one the headers describe.
            return Ok(judged
                .iter()
                .flatten()
                .map(|j| {
                    let ahead = j.tat - now;
                    let room = j.window.saturating_sub(ahead);
                    Burst {
                        burst: j.limit.burst,
                        remaining: u32::try_from(room / j.interval.max(1)).unwrap_or(u32::MAX),
                        full_in: Duration::from_nanos(ahead).as_secs_f64().ceil() as u64,
                    }
                })
                .min_by_key(|b| b.remaining));
        }
    }

    /// Drops the buckets that are full (they hold nothing a new bucket would not).
    pub fn prune_full(&self) {
        self.prune(self.inner.now());
    }

    fn prune(&self, now: u64) {
        self.inner
            .buckets
            .retain(|_, b| b.tat.load(Ordering::Acquire) > now);
    }

    /// Buckets held now.
    pub fn len(&self) -> usize {
        self.inner.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Bucket {
    /// Nanoseconds between calls at this replica's share of the rate.
    fn interval(&self) -> u64 {
        1_000_000_000 * u64::from(self.replicas) / u64::from(self.limit.per_second.max(1))
    }

    fn judge(&self, now: u64) -> Judged {
        let interval = self.interval();
        let share = self.limit.burst.div_ceil(self.replicas).max(1);
        let seen = self.tat.load(Ordering::Acquire);
        Judged {
            tat: seen.max(now) + interval,
            seen,
            interval,
            // Up to `share` calls at once: the last one may arrive `share - 1`
            // intervals ahead of its time.
            window: interval * u64::from(share),
            limit: self.limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn limit(per_second: u32, burst: u32) -> RateLimit {
        RateLimit { per_second, burst }
    }

    /// Calls admitted at `now` out of `n` tried.
    fn admitted(
        limits: &RateLimits,
        n: u32,
        account: Option<(i64, RateLimit)>,
        key: Option<(i64, RateLimit)>,
        now: u64,
    ) -> u32 {
        (0..n)
            .filter(|_| limits.check_at(account, key, now).is_ok())
            .count() as u32
    }

    #[test]
    fn a_burst_passes_then_the_rate_refills_it() {
        let limits = RateLimits::new();
        let account = Some((1, limit(10, 20)));
        assert_eq!(admitted(&limits, 50, account, None, SECOND), 20);
        // A tenth of a second later, one more call's room.
        assert_eq!(admitted(&limits, 5, account, None, SECOND + SECOND / 10), 1);
        // Over ten seconds, the rate.
        let mut total = 0;
        for tick in 1..=100 {
            total += admitted(&limits, 5, account, None, 2 * SECOND + tick * SECOND / 10);
        }
        assert!((100..=120).contains(&total), "{total}");
    }

    #[test]
    fn a_refusal_says_when_a_call_would_pass() {
        let limits = RateLimits::new();
        let account = Some((1, limit(1, 2)));
        assert!(limits.check_at(account, None, SECOND).is_ok());
        let second = limits.check_at(account, None, SECOND).unwrap().unwrap();
        assert_eq!(second.remaining, 0);
        assert_eq!(second.burst, 2);
        let refused = limits.check_at(account, None, SECOND).unwrap_err();
        assert_eq!(refused.retry_after, 1);
        assert_eq!(refused.burst.remaining, 0);
    }

    #[test]
    fn the_tighter_of_key_and_account_wins_and_a_refused_call_spends_nothing() {
        let limits = RateLimits::new();
        let account = Some((1, limit(100, 100)));
        let key = Some((7, limit(2, 2)));
        assert_eq!(admitted(&limits, 10, account, key, SECOND), 2);
        // The key's refusals took nothing from the account: its other keys still have 98.
        assert_eq!(admitted(&limits, 200, account, None, SECOND), 98);
    }

    #[test]
    fn each_replica_enforces_its_share() {
        let limits = RateLimits::new();
        limits.set_replicas(4);
        let account = Some((1, limit(100, 100)));
        assert_eq!(admitted(&limits, 100, account, None, SECOND), 25);
        let mut total = 0;
        for tick in 1..=100 {
            total += admitted(&limits, 10, account, None, SECOND + tick * SECOND / 10);
        }
        // 100 calls a second over four replicas: 25 a second here, 250 in ten seconds.
        assert!((245..=255).contains(&total), "{total}");
    }

    #[test]
    fn no_limit_costs_no_bucket() {
        let limits = RateLimits::new();
        assert_eq!(limits.check(None, None), Ok(None));
        assert!(limits.is_empty());
    }

    #[test]
    fn full_buckets_are_pruned() {
        let limits = RateLimits::new();
        assert!(
            limits
                .check_at(Some((1, limit(10, 10))), None, SECOND)
                .is_ok()
        );
        limits.prune(SECOND);
        assert_eq!(limits.len(), 1);
        limits.prune(3 * SECOND);
        assert!(limits.is_empty());
    }
}
