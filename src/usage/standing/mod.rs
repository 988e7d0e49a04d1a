//! This replica's view of each calling account's standing (SPEC §3.1.6, §6): the
//! figures of the quota headers, and the hard limit.
//!
//! At start the view reads, in pages, the standings of the accounts with calls this
//! month (up to half of [`MAX_ENTRIES`]; `preload.rs`), so a replica that starts under load does not send
//! PostgreSQL five reads for each account on its first call. Any other account's
//! standing is read from PostgreSQL on its first call; either way it is then kept current
//! without a round trip per call: by what this replica accounts ([`QuotaView::observe`])
//! and by what the others account or activate (they `NOTIFY` [`CHANNEL`](super::announce::CHANNEL) with the
//! account ids; entries named there are read again on their next call). A lost
//! listener empties the view.
//!
//! Hard plans: a replica forwards a call only on units it has reserved. It reserves a
//! block under the account's row lock (the lock accounting takes too), counting
//! against the allowance every unit other replicas hold or have forwarded but not yet
//! had accounted (`quota_reservation`), so across any number of replicas the units
//! forwarded never exceed the allowance — except by calls whose cost only the
//! upstream's header revealed. Blocks shrink as the allowance runs out, idle blocks go
//! back, and a replica that vanishes leaves its reservations to expire.
//!
//! Every call reads its account's entry, so the entries are a sharded map: calls of
//! different accounts take no lock in common.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

mod news;
mod preload;
mod windows;

use super::report::standings;
use super::rules::{Enforcement, PlanTerms, Standing};
use super::spending::reservation_block;
use crate::config::Catalogue;
use crate::month::{Day, Month, seconds_until};
use crate::throttle::Throttler;
pub use windows::{Wall, known_wall};
use windows::{Window, latest_wall, refusing_windows, reserves};

/// How long an entry is trusted without news (a safety net under notifications).
const ENTRY_TTL: Duration = Duration::from_secs(60);
/// Entries held at most; a full view starts over.
const MAX_ENTRIES: usize = 200_000;
/// Shards of the entries' map.
const SHARDS: usize = 64;
/// How long a reservation lasts unless renewed.
const LEASE: Duration = Duration::from_secs(60);
/// A block unused this long goes back to the account.
const IDLE_BLOCK: Duration = Duration::from_secs(10);
/// How often blocks are renewed or returned.
const KEEPER_EVERY: Duration = Duration::from_secs(5);

/// What the proxy should do with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it; `reserved_by` is set when the call spends a hard plan's reservation.
    Forward {
        standing: Option<Standing>,
        reserved_by: Option<Uuid>,
    },
    /// A window that refuses is used up (a hard plan's month or day, or a spend cap):
    /// refuse, retry after the latest wall among the windows used up.
    Refuse {
        standing: Standing,
        retry_after: i64,
        wall: Wall,
    },
}

#[derive(Debug)]
struct Entry {
    standing: Standing,
    month: Month,
    day: Day,
    loaded_at: Instant,
    /// Units of a hard plan this replica holds for `block_day`.
    block: i64,
    block_day: Day,
    block_lease_until: Instant,
    block_used_at: Instant,
}

struct Inner {
    db: PgPool,
    free_monthly_calls: i64,
    /// Holds the free grant's features and rate limit (`usage.free_*`), as the last
    /// reload left them.
    catalogue: Catalogue,
    replica: Uuid,
    throttler: Throttler,
    entries: DashMap<i64, Entry>,
    /// Counts what made entries stale (plans changed here or elsewhere, a lost
    /// listener): a page read at start is kept only if nothing changed while it was
    /// read and put in.
    changes: AtomicU64,
    /// One reservation at a time per account on this replica.
    reserving: tokio::sync::Mutex<()>,
}

impl Entry {
    /// Whether the entry still answers for `now`: same month and day, read recently, and
    /// no subscription has started or ended since.
    fn fresh(&self, month: Month, day: Day, now: DateTime<Utc>) -> bool {
        self.month == month
            && self.day == day
            && self.loaded_at.elapsed() < ENTRY_TTL
            && self.standing.next_change.is_none_or(|t| now < t)
    }
}

/// The view. Cheap to clone; [`QuotaView::disabled`] (metering off) knows nothing.
#[derive(Clone)]
pub struct QuotaView {
    inner: Option<Arc<Inner>>,
}

impl QuotaView {
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    pub fn new(
        db: PgPool,
        free_monthly_calls: i64,
        catalogue: Catalogue,
        throttler: Throttler,
    ) -> Self {
        Self {
            inner: Some(Arc::new(Inner {
                db,
                free_monthly_calls,
                catalogue,
                replica: Uuid::new_v4(),
                throttler,
                entries: DashMap::with_shard_amount(SHARDS),
                changes: AtomicU64::new(0),
                reserving: tokio::sync::Mutex::new(()),
            })),
        }
    }

    /// This replica's id in `quota_reservation` and in notifications.
    pub fn replica(&self) -> Option<Uuid> {
        self.inner.as_ref().map(|i| i.replica)
    }

    /// Decides a call of `cost` units for `account_id` at `now`. Reads PostgreSQL only
    /// for an account not seen lately, and for a hard plan whose reserved block ran out.
    pub async fn check(
        &self,
        account_id: i64,
        cost: i64,
        now: DateTime<Utc>,
    ) -> Result<Verdict, sqlx::Error> {
        let Some(inner) = &self.inner else {
            return Ok(Verdict::Forward {
                standing: None,
                reserved_by: None,
            });
        };
        let standing = inner.standing(account_id, now).await?;
        if !reserves(&standing) {
            return Ok(Verdict::Forward {
                standing: Some(standing),
                reserved_by: None,
            });
        }
        if inner.spend_block(account_id, cost, now) {
            return Ok(Verdict::Forward {
                standing: Some(standing),
                reserved_by: Some(inner.replica),
            });
        }
        inner.reserve(account_id, cost, now).await
    }

    /// Spends `units` more of a call already let through (a stream's usage, SPEC §20)
    /// from this replica's reserved block, if it holds enough; no waiting.
    pub fn try_spend(&self, account_id: i64, units: i64, now: DateTime<Utc>) -> bool {
        match &self.inner {
            Some(inner) => inner.spend_block(account_id, units, now),
            None => true,
        }
    }

    /// Spends `units` more of a call already let through, reserving another block when
    /// this replica's runs out. `Some(wall)` when they do not fit: the account would
    /// pass a window that refuses, and the stream is to stop.
    pub async fn spend_more(
        &self,
        account_id: i64,
        units: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<Wall>, sqlx::Error> {
        let Some(inner) = &self.inner else {
            return Ok(None);
        };
        if inner.spend_block(account_id, units, now) {
            return Ok(None);
        }
        Ok(match inner.reserve(account_id, units, now).await? {
            Verdict::Forward { .. } => None,
            Verdict::Refuse { wall, .. } => Some(wall),
        })
    }

    /// The account's standing as this replica knows it (quota headers of a call
    /// refused before the account's check), spending and reserving nothing.
    pub async fn standing(
        &self,
        account_id: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<Standing>, sqlx::Error> {
        match &self.inner {
            Some(inner) => inner.standing(account_id, now).await.map(Some),
            None => Ok(None),
        }
    }

    /// What the account's active subscription entitles it to besides units (features,
    /// rate limit), as this replica knows it: read with the standing, so it costs a
    /// round trip only when the standing does. `None` when metering is off.
    pub async fn terms(
        &self,
        account_id: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<Arc<PlanTerms>>, sqlx::Error> {
        let Some(inner) = &self.inner else {
            return Ok(None);
        };
        let (month, day) = (Month::containing(now), Day::containing(now));
        let cached = inner.entries.get(&account_id).and_then(|entry| {
            entry
                .fresh(month, day, now)
                .then(|| entry.standing.terms.clone())
        });
        let terms = match cached {
            Some(terms) => terms,
            None => inner.standing(account_id, now).await?.terms,
        };
        Ok(Some(terms.unwrap_or_else(|| inner.catalogue.free_terms())))
    }

    /// Takes the standings this replica just accounted.
    pub fn observe(&self, accounted: &[Standing], now: DateTime<Utc>) {
        let Some(inner) = &self.inner else { return };
        for standing in accounted {
            if let Some(mut entry) = inner.entries.get_mut(&standing.account_id) {
                // Accounting does not read the account's other subscriptions: the next
                // change the entry knew of still stands.
                let next_change = standing.next_change.or(entry.standing.next_change);
                entry.standing = standing.clone();
                entry.standing.next_change = next_change;
                entry.month = Month::containing(now);
                entry.day = Day::containing(now);
                entry.loaded_at = Instant::now();
            }
        }
    }

    /// Forgets what this replica knows of `account_ids` (their plan changed).
    pub fn forget(&self, account_ids: &[i64]) {
        let Some(inner) = &self.inner else { return };
        inner.changes.fetch_add(1, Ordering::SeqCst);
        for id in account_ids {
            inner.entries.remove(id);
        }
    }

    /// Reads this month's standings, listens for other replicas' notifications and
    /// keeps reserved blocks alive (or returns them) until `stop`; then returns every
    /// block.
    pub fn start(&self, stop: CancellationToken) -> Option<JoinHandle<()>> {
        let inner = self.inner.clone()?;
        Some(tokio::spawn(async move {
            // Read once the listener is in place: what it starts over from is then
            // not the preload's figures, and news from then on marks them stale.
            let listening_since = Arc::new(tokio::sync::Notify::new());
            let preloading = async {
                let preload = async {
                    listening_since.notified().await;
                    inner.preload(Utc::now()).await;
                };
                tokio::select! {
                    _ = preload => {}
                    _ = stop.cancelled() => {}
                }
            };
            let listening = inner.listen(stop.clone(), listening_since.clone());
            let keeping = keep_blocks(inner.clone(), stop.clone());
            tokio::join!(preloading, listening, keeping);
            inner.return_blocks(|_| true).await;
        }))
    }
}

impl Inner {
    async fn standing(&self, account_id: i64, now: DateTime<Utc>) -> Result<Standing, sqlx::Error> {
        let (month, day) = (Month::containing(now), Day::containing(now));
        if let Some(entry) = self.entries.get(&account_id)
            && entry.fresh(month, day, now)
        {
            return Ok(entry.standing.clone());
        }
        metrics::counter!("tollgate_standing_reads_total", "source" => "call").increment(1);
        let mut conn = self.db.acquire().await?;
        let standing = standings(
            &mut conn,
            &[account_id],
            month,
            now,
            self.free_monthly_calls,
        )
        .await?
        .into_iter()
        .next()
        .unwrap_or_else(|| free_standing(account_id, self.free_monthly_calls));
        if standing.daily.is_some() {
            self.throttler.watch_daily();
        }
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.clear();
        }
        let mut entry = self.entries.entry(account_id).or_insert_with(|| Entry {
            standing: standing.clone(),
            month,
            day,
            loaded_at: Instant::now(),
            block: 0,
            block_day: day,
            block_lease_until: Instant::now(),
            block_used_at: Instant::now(),
        });
        entry.standing = standing.clone();
        entry.month = month;
        entry.day = day;
        entry.loaded_at = Instant::now();
        Ok(standing)
    }

    /// Spends `cost` from this replica's block of the account, if it has enough.
    fn spend_block(&self, account_id: i64, cost: i64, now: DateTime<Utc>) -> bool {
        let Some(mut entry) = self.entries.get_mut(&account_id) else {
            return false;
        };
        // A block whose lease may have lapsed is not spent: the units may be gone.
        let usable = entry.block_day == Day::containing(now)
            && Instant::now() + KEEPER_EVERY < entry.block_lease_until;
        if usable && entry.block >= cost {
            entry.block -= cost;
            entry.block_used_at = Instant::now();
            true
        } else {
            false
        }
    }

    /// Reserves a block under the account's row lock, or refuses the call.
    async fn reserve(
        &self,
        account_id: i64,
        cost: i64,
        now: DateTime<Utc>,
    ) -> Result<Verdict, sqlx::Error> {
        let _one_at_a_time = self.reserving.lock().await;
        // Another call may have reserved while this one waited.
        if self.spend_block(account_id, cost, now) {
            let standing = self.standing(account_id, now).await?;
            return Ok(Verdict::Forward {
                standing: Some(standing),
                reserved_by: Some(self.replica),
            });
        }
        let (month, day) = (Month::containing(now), Day::containing(now));
        let leftover = self.take_block(account_id);
        let mut tx = self.db.begin().await?;
        crate::db::lock_account(&mut tx, account_id).await?;
        if leftover > 0 {
            give_back(&mut tx, account_id, self.replica, leftover).await?;
        }
        let standing = standings(&mut tx, &[account_id], month, now, self.free_monthly_calls)
            .await?
            .into_iter()
            .next()
            .unwrap_or_else(|| free_standing(account_id, self.free_monthly_calls));
        let (month_out, day_out): (i64, i64) = sqlx::query_as(
            "SELECT coalesce(sum(greatest(granted - accounted, 0)), 0)::bigint,
                    coalesce(sum(greatest(granted - accounted, 0))
                             FILTER (WHERE day_start = $3), 0)::bigint
             FROM quota_reservation
             WHERE account_id = $1 AND day_start >= $2 AND day_start < $4 AND expires_at > now()",
        )
        .bind(account_id)
        .bind(month.start())
        .bind(day.start())
        .bind(month.end())
        .fetch_one(&mut *tx)
        .await?;
        let windows = refusing_windows(&standing, month_out, day_out, now);
        let available = windows.iter().map(|w| w.left).min().unwrap_or(i64::MAX);
        let block = reservation_block(available, cost);
        if block == 0 {
            tx.commit().await?;
            self.put(account_id, &standing, now, 0);
            let refused = latest_wall(&windows, cost).unwrap_or(Window {
                left: 0,
                ends: month.end(),
                wall: Wall::Quota,
                daily: false,
            });
            let standing = match refused.wall {
                Wall::Quota => standing.refused(refused.daily),
                Wall::SpendCap => standing,
            };
            return Ok(Verdict::Refuse {
                retry_after: seconds_until(refused.ends, now),
                standing,
                wall: refused.wall,
            });
        }
        sqlx::query(
            "INSERT INTO quota_reservation (account_id, replica, day_start, granted, expires_at)
             VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
             ON CONFLICT (account_id, day_start, replica) DO UPDATE
                 SET granted = quota_reservation.granted + EXCLUDED.granted,
                     expires_at = EXCLUDED.expires_at",
        )
        .bind(account_id)
        .bind(self.replica)
        .bind(day.start())
        .bind(block)
        .bind(LEASE.as_secs_f64())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        metrics::counter!("tollgate_quota_reservations_total").increment(1);
        self.put(account_id, &standing, now, block - cost);
        Ok(Verdict::Forward {
            standing: Some(standing),
            reserved_by: Some(self.replica),
        })
    }

    /// Takes the account's block out of the entry (to be given back).
    fn take_block(&self, account_id: i64) -> i64 {
        self.entries
            .get_mut(&account_id)
            .map_or(0, |mut e| std::mem::take(&mut e.block))
    }

    fn put(&self, account_id: i64, standing: &Standing, now: DateTime<Utc>, block: i64) {
        let at = Instant::now();
        self.entries.insert(
            account_id,
            Entry {
                standing: standing.clone(),
                month: Month::containing(now),
                day: Day::containing(now),
                loaded_at: at,
                block,
                block_day: Day::containing(now),
                block_lease_until: at + LEASE,
                block_used_at: at,
            },
        );
    }

    /// Gives back the blocks `which` selects; renews the leases of the others.
    async fn return_blocks(&self, which: impl Fn(&Entry) -> bool) {
        let (to_return, to_renew): (Vec<(i64, i64)>, Vec<i64>) = {
            let mut back = Vec::new();
            let mut renew = Vec::new();
            for mut item in self.entries.iter_mut().filter(|e| e.block > 0) {
                let (id, entry) = item.pair_mut();
                if which(entry) {
                    back.push((*id, std::mem::take(&mut entry.block)));
                } else {
                    entry.block_lease_until = Instant::now() + LEASE;
                    renew.push(*id);
                }
            }
            (back, renew)
        };
        for (account_id, units) in to_return {
            let result = async {
                let mut conn = self.db.acquire().await?;
                give_back(&mut conn, account_id, self.replica, units).await
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(account_id, units, error = %e,
                    "returning reserved units failed; they come back when the lease expires");
            }
        }
        if !to_renew.is_empty()
            && let Err(e) = sqlx::query(
                "UPDATE quota_reservation SET expires_at = now() + make_interval(secs => $3)
                 WHERE account_id = ANY($1) AND replica = $2",
            )
            .bind(&to_renew)
            .bind(self.replica)
            .bind(LEASE.as_secs_f64())
            .execute(&self.db)
            .await
        {
            tracing::warn!(error = %e, "renewing reservations failed");
        }
    }
}

/// Hands `units` of this replica's reservation of the account back.
async fn give_back(
    conn: &mut sqlx::PgConnection,
    account_id: i64,
    replica: Uuid,
    units: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE quota_reservation SET granted = greatest(granted - $3, accounted)
         WHERE account_id = $1 AND replica = $2 AND day_start = (
             SELECT max(day_start) FROM quota_reservation WHERE account_id = $1 AND replica = $2)",
    )
    .bind(account_id)
    .bind(replica)
    .bind(units)
    .execute(conn)
    .await?;
    Ok(())
}

fn free_standing(account_id: i64, free_monthly_calls: i64) -> Standing {
    Standing {
        terms: None,
        next_change: None,
        account_id,
        plan: super::rules::FREE_PLAN.into(),
        enforcement: Enforcement::Soft,
        allowance: free_monthly_calls,
        used: 0,
        credits: 0,
        daily: None,
        day_used: 0,
    }
}

/// Returns idle blocks and renews busy ones, every [`KEEPER_EVERY`].
async fn keep_blocks(inner: Arc<Inner>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(KEEPER_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        inner
            .return_blocks(|e| {
                e.block_used_at.elapsed() >= IDLE_BLOCK
                    || e.block_day != Day::containing(Utc::now())
            })
            .await;
        let _ = sqlx::query(
            "DELETE FROM quota_reservation WHERE expires_at < now() - interval '1 day'",
        )
        .execute(&inner.db)
        .await;
    }
}
