//! Per-key monthly limits (SPEC §13): this replica's view of each calling key's limit,
//! and the units it has reserved for limited keys.
//!
//! A key's limit is read from PostgreSQL on its first call here, then trusted until
//! [`ENTRY_TTL`] passes or a `NOTIFY` on [`CHANNEL`] (sent by the V14 trigger whenever
//! a key's `monthly_limit` changes) names it. A key without a limit costs nothing more.
//! Through a limited key a replica forwards a call only on units it has reserved, as
//! hard plans do (`standing`): it reserves a block under the key's row lock, counting
//! against the limit what was accounted (the rollup's units) and what every replica
//! holds or has forwarded but not yet had accounted (`key_quota_reservation`), read in
//! one statement, so across replicas the units forwarded never exceed the limit except
//! by calls whose cost only the upstream's header revealed. Idle blocks go back, busy
//! ones are renewed, and a vanished replica's reservations expire.
//!
//! The entries live in [`SHARDS`] independently locked maps (no lock shared by every
//! call), and a block is reserved by one task at a time per shard.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::key_blocks::{LEASE, give_back, renew, reserve_block};
use crate::month::{Month, seconds_until};
use crate::sync::lock;

/// Channel on which the V14 trigger names keys whose limit changed.
pub const CHANNEL: &str = "tollgate_key_limit";
/// Independently locked parts of the view.
const SHARDS: usize = 64;
/// How long a key's limit is trusted without news (a safety net under notifications).
const ENTRY_TTL: Duration = Duration::from_secs(60);
/// Entries held at most per shard; a full shard starts over (keeping held blocks).
const MAX_ENTRIES_PER_SHARD: usize = 4_096;
/// A block unused this long goes back.
const IDLE_BLOCK: Duration = Duration::from_secs(10);
/// How often blocks are renewed or returned.
const KEEPER_EVERY: Duration = Duration::from_secs(5);
/// How long a refusal is repeated without asking PostgreSQL while other replicas hold
/// the key's last units (they may hand them back).
const REFUSAL_HELD: Duration = Duration::from_secs(1);

/// What a key's limit says of a call.
#[must_use]
pub enum KeyVerdict {
    /// Forward it; the hold says whether units of the key were reserved for it.
    Pass(KeyHold),
    /// The key's month is used up: refuse, retry after the month's end. `limit` is the
    /// key's monthly limit, for the refusal's quota headers.
    Refuse { retry_after: i64, limit: i64 },
}

/// Units of a limited key spent on one call. Dropped without [`KeyHold::settle`] (the
/// call was refused further on, or the upstream never answered), they go back to this
/// replica's block.
#[must_use]
pub struct KeyHold {
    spent: Option<(Arc<Inner>, i64, i64)>,
}

impl KeyHold {
    fn none() -> Self {
        Self { spent: None }
    }

    /// The call was answered and costs `cost`: the replica whose reservation paid for
    /// it (to be settled by accounting), when the key is limited. Units reserved beyond
    /// `cost` go back to the block.
    pub fn settle(mut self, cost: i64) -> Option<Uuid> {
        let (inner, key_id, reserved) = self.spent.take()?;
        if reserved > cost {
            inner.refund(key_id, reserved - cost);
        }
        Some(inner.replica)
    }
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        if let Some((inner, key_id, reserved)) = self.spent.take() {
            inner.refund(key_id, reserved);
        }
    }
}

#[derive(Debug)]
struct Entry {
    limit: Option<i64>,
    month: Month,
    loaded_at: Instant,
    /// Named by a notification since it was read.
    stale: bool,
    /// Units of `month` this replica holds for the key.
    block: i64,
    lease_until: Instant,
    used_at: Instant,
    /// Refuse without asking until then.
    refused_until: Option<Instant>,
}

#[derive(Default)]
struct Shard {
    entries: Mutex<HashMap<i64, Entry>>,
    reserving: tokio::sync::Mutex<()>,
}

struct Inner {
    db: PgPool,
    replica: Uuid,
    shards: Box<[Shard]>,
}

/// The view. Cheap to clone; [`KeyLimits::disabled`] (metering off) limits nothing.
#[derive(Clone)]
pub struct KeyLimits {
    inner: Option<Arc<Inner>>,
}

/// What the view alone can say of a call.
enum Fast {
    Unlimited,
    Spent,
    /// Refused: seconds to the month's end, and the key's limit.
    Refused(i64, i64),
    Ask,
}

impl KeyLimits {
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    pub fn new(db: PgPool) -> Self {
        Self {
            inner: Some(Arc::new(Inner {
                db,
                replica: Uuid::new_v4(),
                shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            })),
        }
    }

    /// Decides a call of `cost` units through `key_id` at `now`. Reads PostgreSQL only
    /// for a key not seen lately, and for a limited key whose block ran out;
    /// `limit_read` is the key's limit when the caller has just read the key's row
    /// (authentication on a key-cache miss), which spares the view its own read.
    pub async fn check(
        &self,
        key_id: i64,
        limit_read: Option<Option<i64>>,
        cost: i64,
        now: DateTime<Utc>,
    ) -> Result<KeyVerdict, sqlx::Error> {
        let Some(inner) = &self.inner else {
            return Ok(KeyVerdict::Pass(KeyHold::none()));
        };
        let verdict = match inner.fast(key_id, cost, now) {
            Fast::Ask => inner.ask(key_id, limit_read, cost, now).await?,
            fast => fast,
        };
        Ok(match verdict {
            Fast::Unlimited => KeyVerdict::Pass(KeyHold::none()),
            Fast::Spent => KeyVerdict::Pass(KeyHold {
                spent: Some((inner.clone(), key_id, cost)),
            }),
            Fast::Refused(retry_after, limit) => KeyVerdict::Refuse {
                retry_after: retry_after.max(1),
                limit,
            },
            // `ask` always decides; should it not, the call is not forwarded unchecked.
            Fast::Ask => KeyVerdict::Refuse {
                retry_after: seconds_until(Month::containing(now).end(), now).max(1),
                limit: 0,
            },
        })
    }

    /// Forgets what this replica knows of `key_id`'s limit (it was just changed here).
    pub fn forget(&self, key_id: i64) {
        if let Some(inner) = &self.inner {
            inner.mark_stale(key_id);
        }
    }

    /// Listens for limit changes and keeps reserved blocks alive (or returns them)
    /// until `stop`; then returns every block.
    pub fn start(&self, stop: CancellationToken) -> Option<JoinHandle<()>> {
        let inner = self.inner.clone()?;
        Some(tokio::spawn(async move {
            tokio::join!(
                listen(inner.clone(), stop.clone()),
                keep_blocks(inner.clone(), stop.clone())
            );
            inner.return_blocks(|_| true).await;
        }))
    }
}

impl Inner {
    fn shard(&self, key_id: i64) -> &Shard {
        &self.shards[key_id.rem_euclid(SHARDS as i64) as usize]
    }

    fn fast(&self, key_id: i64, cost: i64, now: DateTime<Utc>) -> Fast {
        let month = Month::containing(now);
        let mut entries = lock(&self.shard(key_id).entries);
        let Some(entry) = entries.get_mut(&key_id) else {
            return Fast::Ask;
        };
        if entry.stale || entry.month != month || entry.loaded_at.elapsed() >= ENTRY_TTL {
            return Fast::Ask;
        }
        if entry.limit.is_none() {
            return Fast::Unlimited;
        }
        let at = Instant::now();
        // A block whose lease may have lapsed is not spent: its units may be gone.
        if entry.block >= cost && at + KEEPER_EVERY < entry.lease_until {
            entry.block -= cost;
            entry.used_at = at;
            return Fast::Spent;
        }
        match (entry.refused_until, entry.limit) {
            (Some(until), Some(limit)) if at < until => {
                Fast::Refused(seconds_until(month.end(), now), limit)
            }
            _ => Fast::Ask,
        }
    }

    /// Reads the key's limit (unless `limit_read` brings it), and reserves a block when
    /// it has one.
    async fn ask(
        &self,
        key_id: i64,
        limit_read: Option<Option<i64>>,
        cost: i64,
        now: DateTime<Utc>,
    ) -> Result<Fast, sqlx::Error> {
        let month = Month::containing(now);
        let limited = lock(&self.shard(key_id).entries)
            .get(&key_id)
            .is_some_and(|e| e.limit.is_some() || e.block > 0);
        if !limited {
            // Most keys have no limit, and one read says so.
            let limit: Option<Option<i64>> = match limit_read {
                Some(read) => Some(read),
                None => {
                    sqlx::query_scalar("SELECT monthly_limit FROM api_key WHERE id = $1")
                        .bind(key_id)
                        .fetch_optional(&self.db)
                        .await?
                }
            };
            if limit.flatten().is_none() {
                self.put(key_id, month, None, 0, None);
                return Ok(Fast::Unlimited);
            }
        }
        let _one_at_a_time = self.shard(key_id).reserving.lock().await;
        // Another call may have reserved (or been told no) while this one waited.
        match self.fast(key_id, cost, now) {
            Fast::Ask => {}
            fast => return Ok(fast),
        }
        let leftover = self.take_block(key_id);
        let mut tx = self.db.begin().await?;
        if let Some((held_month, units)) = leftover {
            give_back(&mut tx, key_id, held_month, self.replica, units).await?;
        }
        let reserved = reserve_block(&mut tx, key_id, month, self.replica, cost).await?;
        tx.commit().await?;
        Ok(match reserved {
            None => {
                self.put(key_id, month, None, 0, None);
                Fast::Unlimited
            }
            Some(r) if r.block > 0 => {
                metrics::counter!("tollgate_key_reservations_total").increment(1);
                self.put(key_id, month, Some(r.limit), r.block - cost, None);
                Fast::Spent
            }
            Some(r) => {
                // Used up for good until the limit changes (a notification) or the
                // month ends; only held elsewhere, worth asking again shortly.
                let hold = if r.used_up { ENTRY_TTL } else { REFUSAL_HELD };
                self.put(key_id, month, Some(r.limit), 0, Some(Instant::now() + hold));
                Fast::Refused(seconds_until(month.end(), now), r.limit)
            }
        })
    }

    fn put(
        &self,
        key_id: i64,
        month: Month,
        limit: Option<i64>,
        block: i64,
        refused_until: Option<Instant>,
    ) {
        let at = Instant::now();
        let mut entries = lock(&self.shard(key_id).entries);
        if entries.len() >= MAX_ENTRIES_PER_SHARD && !entries.contains_key(&key_id) {
            entries.retain(|_, e| e.block > 0);
        }
        entries.insert(
            key_id,
            Entry {
                limit,
                month,
                loaded_at: at,
                stale: false,
                block,
                lease_until: at + LEASE,
                used_at: at,
                refused_until,
            },
        );
    }

    /// Takes the key's block out of its entry (to be given back), with its month.
    fn take_block(&self, key_id: i64) -> Option<(Month, i64)> {
        let mut entries = lock(&self.shard(key_id).entries);
        let entry = entries.get_mut(&key_id)?;
        let units = std::mem::take(&mut entry.block);
        (units > 0).then_some((entry.month, units))
    }

    /// Puts `units` a call did not use back into the key's block.
    fn refund(&self, key_id: i64, units: i64) {
        if let Some(entry) = lock(&self.shard(key_id).entries).get_mut(&key_id) {
            entry.block += units;
        }
    }

    fn mark_stale(&self, key_id: i64) {
        if let Some(entry) = lock(&self.shard(key_id).entries).get_mut(&key_id) {
            entry.stale = true;
            entry.refused_until = None;
        }
    }

    fn mark_all_stale(&self) {
        for shard in self.shards.iter() {
            for entry in lock(&shard.entries).values_mut() {
                entry.stale = true;
                entry.refused_until = None;
            }
        }
    }

    /// Gives back the blocks `which` selects; renews the leases of the others.
    async fn return_blocks(&self, which: impl Fn(&Entry) -> bool) {
        let mut back = Vec::new();
        let mut keep = Vec::new();
        for shard in self.shards.iter() {
            let mut entries = lock(&shard.entries);
            for (key_id, entry) in entries.iter_mut().filter(|(_, e)| e.block > 0) {
                if which(entry) {
                    back.push((*key_id, entry.month, std::mem::take(&mut entry.block)));
                } else {
                    entry.lease_until = Instant::now() + LEASE;
                    keep.push(*key_id);
                }
            }
        }
        for (key_id, month, units) in back {
            let result = async {
                let mut conn = self.db.acquire().await?;
                give_back(&mut conn, key_id, month, self.replica, units).await
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(key_id, units, error = %e,
                    "returning a key's reserved units failed; they come back when the lease expires");
            }
        }
        if let Err(e) = renew(&self.db, &keep, self.replica).await {
            tracing::warn!(error = %e, "renewing key reservations failed");
        }
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
        let month = Month::containing(Utc::now());
        inner
            .return_blocks(|e| e.used_at.elapsed() >= IDLE_BLOCK || e.month != month)
            .await;
        let _ = sqlx::query(
            "DELETE FROM key_quota_reservation WHERE expires_at < now() - interval '1 day'",
        )
        .execute(&inner.db)
        .await;
    }
}

/// Applies limit changes until `stop`. What changed while not listening is unknown, so
/// every (re)connect marks every entry stale.
async fn listen(inner: Arc<Inner>, stop: CancellationToken) {
    crate::db::listen(
        &inner.db,
        CHANNEL,
        "key limit",
        &stop,
        || inner.mark_all_stale(),
        |payload| {
            if let Ok(key_id) = payload.parse::<i64>() {
                inner.mark_stale(key_id);
            }
        },
    )
    .await;
}
