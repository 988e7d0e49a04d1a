//! A per-replica cache of API-key lookups, kept honest by PostgreSQL LISTEN/NOTIFY.
//!
//! Only keys found valid are cached (by their SHA-256), with their expiry, scopes and
//! rate limit; unknown and revoked keys always go to the database. A trigger on
//! `api_key` (migrations V5, V18) notifies channel [`CHANNEL`] with the key's hash
//! whenever a key is revoked or deleted or its expiry, scopes or rate limit change,
//! however that happens; every replica's listener drops the entry at once.
//!
//! The cache answers only while its listener is *proven* live: every [`PING_EVERY`] the
//! replica notifies its own ping through the pool, and entries are trusted only while a
//! ping issued within the last [`TRUST_WINDOW`] has come back. PostgreSQL delivers
//! notifications of different transactions in commit order, so hearing a ping issued
//! after a revocation committed means that revocation's notification was heard (and
//! applied) first. A lost or stalled listener therefore stops the cache within
//! [`TRUST_WINDOW`], and a reconnect flushes it before trusting again: a revoked key is
//! refused by every replica within about one second. The replica that revokes a key
//! through the account API also drops that key from its own cache before answering;
//! revoking a key already revoked changes no row, so no cache hears of it (SPEC §9).
//!
//! A lookup that raced with an invalidation does not insert its (possibly stale) result:
//! inserts carry the invalidation generation read before the database query.
//!
//! A hit writes nothing shared but its metric: the entries are a sharded map read
//! without a global lock, and the writers (inserts after a miss, invalidations) take
//! one mutex of their own, so the generation check and the insert stay one step.
//!
//! Hashes the database did not know are remembered for [`UNKNOWN_TTL`] (at most
//! [`MAX_UNKNOWN`] of them), so a flood of one unknown key costs one query per TTL. This
//! cannot refuse a valid key: keys are created with 238 random bits and shown only once
//! committed, so nobody presents a key before it exists. Only a key inserted by hand
//! with a clear text someone tried in the last [`UNKNOWN_TTL`] waits that long.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use metrics::Counter;

use super::key_policy::KeyPolicy;
use crate::sync::lock;
use crate::telemetry::{RateLimitedLog, Registered};

/// The notification channel of key revocations (and of the replicas' own pings).
pub const CHANNEL: &str = "tollgate_api_key";
/// How often a replica checks that its listener still hears the database.
pub const PING_EVERY: Duration = Duration::from_millis(200);
/// How recent the last ping heard back must be for entries to be trusted.
pub const TRUST_WINDOW: Duration = Duration::from_millis(600);
/// How long a hash the database did not know is answered as unknown without asking.
pub const UNKNOWN_TTL: Duration = Duration::from_secs(5);
/// Most unknown hashes remembered; a full set drops its expired ones, or starts over.
pub const MAX_UNKNOWN: usize = 10_000;
/// Pause before reconnecting a failed listener.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// Shards of the entries' map: enough that two calls rarely share one.
const SHARDS: usize = 64;

/// A valid key, as the database last said.
#[derive(Debug, Clone)]
pub struct CachedKey {
    pub key_id: i64,
    pub account_id: i64,
    /// Its expiry, scopes and rate limit; `None` for an unrestricted key.
    pub policy: Option<Arc<KeyPolicy>>,
    /// When a call through it was last forwarded (epoch seconds; 0 = not since this
    /// replica started): one atomic store per call, written to `api_key.last_used_at`
    /// by `accounts::last_used`.
    pub used: Arc<AtomicI64>,
}

/// The same key with the same policy (its last use aside).
impl PartialEq for CachedKey {
    fn eq(&self, other: &Self) -> bool {
        (self.key_id, self.account_id, &self.policy)
            == (other.key_id, other.account_id, &other.policy)
    }
}

/// The invalidation generation read before a database lookup; see [`KeyCache::insert`].
#[derive(Debug, Clone, Copy)]
pub struct Ticket(u64);

/// The cache. Cheap to clone; [`KeyCache::disabled`] caches nothing.
#[derive(Clone)]
pub struct KeyCache {
    inner: Option<Arc<Inner>>,
    /// Each key's last forwarded call (epoch seconds), shared with its cached entries,
    /// whether or not caching is on; see [`KeyCache::use_of`].
    uses: Arc<DashMap<i64, Arc<AtomicI64>>>,
}

struct Inner {
    entries: DashMap<[u8; 32], CachedKey>,
    /// Held by every writer of `entries`, so an insert's generation check and the
    /// insert are one step against invalidations.
    writing: Mutex<()>,
    /// Hashes the database did not know, with the instant they stop being trusted.
    unknown: RwLock<HashMap<[u8; 32], Instant>>,
    generation: AtomicU64,
    /// Milliseconds since `epoch` at which the newest own ping heard back was issued,
    /// plus one; 0 = none since the last (re)connect.
    heard: AtomicU64,
    epoch: Instant,
    max_entries: usize,
    /// Tells this replica's pings from the others'.
    nonce: String,
}

impl KeyCache {
    pub fn disabled() -> Self {
        Self {
            inner: None,
            uses: Arc::default(),
        }
    }

    /// An empty cache of at most `max_entries` keys; untrusted until [`KeyCache::start`]'s
    /// listener hears its first ping.
    pub fn new(max_entries: usize) -> Self {
        Self {
            uses: Arc::default(),
            inner: Some(Arc::new(Inner {
                entries: DashMap::with_shard_amount(SHARDS),
                writing: Mutex::new(()),
                unknown: RwLock::new(HashMap::new()),
                generation: AtomicU64::new(0),
                heard: AtomicU64::new(0),
                epoch: Instant::now(),
                max_entries: max_entries.max(1),
                nonce: uuid::Uuid::new_v4().simple().to_string(),
            })),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether entries may be served now (the listener was heard recently).
    pub fn trusted(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.trusted(Instant::now()))
    }

    /// The cached key of `hash`, when there is one and the cache is trusted.
    pub fn get(&self, hash: &[u8; 32]) -> Option<CachedKey> {
        let inner = self.inner.as_ref()?;
        if !inner.trusted(Instant::now()) {
            return None;
        }
        let hit = inner.entries.get(hash).map(|entry| entry.clone());
        static HIT: Registered<Counter> = Registered::new();
        static MISS: Registered<Counter> = Registered::new();
        match hit {
            Some(_) => HIT.get(|| metrics::counter!("tollgate_key_cache_total", "result" => "hit")),
            None => MISS.get(|| metrics::counter!("tollgate_key_cache_total", "result" => "miss")),
        }
        .increment(1);
        hit
    }

    /// The last-use cell of `key_id`, made on its first lookup; the same cell for every
    /// entry of the key, so a call records its use with one atomic store.
    pub fn use_of(&self, key_id: i64) -> Arc<AtomicI64> {
        if let Some(cell) = self.uses.get(&key_id) {
            return cell.clone();
        }
        self.uses.entry(key_id).or_default().clone()
    }

    /// Every key's last-use cell (for writing them out).
    pub fn uses(&self) -> &DashMap<i64, Arc<AtomicI64>> {
        &self.uses
    }

    /// Take before the database lookup whose result may be inserted.
    pub fn ticket(&self) -> Ticket {
        Ticket(
            self.inner
                .as_ref()
                .map_or(0, |i| i.generation.load(Ordering::Acquire)),
        )
    }

    /// Caches a key the database found valid, unless anything was invalidated since
    /// `ticket` was taken (the lookup may have read a row a revocation then changed).
    pub fn insert(&self, ticket: Ticket, hash: [u8; 32], key: CachedKey) {
        let Some(inner) = &self.inner else { return };
        let _writing = lock(&inner.writing);
        // Checked under the writers' lock: invalidations bump the generation under it too.
        if inner.generation.load(Ordering::Acquire) != ticket.0 {
            return;
        }
        if inner.entries.len() >= inner.max_entries && !inner.entries.contains_key(&hash) {
            inner.entries.clear();
        }
        inner.entries.insert(hash, key);
    }

    /// Whether the database said, less than [`UNKNOWN_TTL`] before `now`, that it has no
    /// key of this hash.
    pub fn is_known_unknown(&self, hash: &[u8; 32], now: Instant) -> bool {
        let Some(inner) = &self.inner else {
            return false;
        };
        let known = read(&inner.unknown)
            .get(hash)
            .is_some_and(|until| now < *until);
        if known {
            metrics::counter!("tollgate_key_cache_total", "result" => "negative_hit").increment(1);
        }
        known
    }

    /// Remembers that the database has no key of this hash (as of `now`).
    pub fn remember_unknown(&self, hash: [u8; 32], now: Instant) {
        let Some(inner) = &self.inner else { return };
        let mut unknown = write(&inner.unknown);
        if unknown.len() >= MAX_UNKNOWN && !unknown.contains_key(&hash) {
            unknown.retain(|_, until| now < *until);
            if unknown.len() >= MAX_UNKNOWN {
                unknown.clear();
            }
        }
        unknown.insert(hash, now + UNKNOWN_TTL);
    }

    /// Forgets one key (its hash was notified).
    pub fn invalidate(&self, hash: &[u8; 32]) {
        let Some(inner) = &self.inner else { return };
        let _writing = lock(&inner.writing);
        inner.generation.fetch_add(1, Ordering::AcqRel);
        inner.entries.remove(hash);
    }

    /// Forgets every key.
    pub fn flush(&self) {
        let Some(inner) = &self.inner else { return };
        let _writing = lock(&inner.writing);
        inner.generation.fetch_add(1, Ordering::AcqRel);
        inner.entries.clear();
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.entries.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs the listener until `stop`: LISTEN, flush, then apply notifications and ping;
    /// on any failure stop trusting, flush, and reconnect. Does nothing when disabled.
    pub fn start(&self, db: PgPool, stop: CancellationToken) -> Option<JoinHandle<()>> {
        let inner = self.inner.clone()?;
        let cache = self.clone();
        Some(tokio::spawn(async move {
            let log = RateLimitedLog::default();
            while !stop.is_cancelled() {
                if let Err(e) = cache.listen(&inner, &db, &stop).await {
                    if log.allow() {
                        tracing::warn!(error = %e, suppressed = log.take_suppressed(),
                            "api key cache listener lost; the cache is bypassed until it is back");
                    }
                    metrics::counter!("tollgate_key_cache_listener_errors_total").increment(1);
                }
                inner.heard.store(0, Ordering::Release);
                cache.flush();
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
                }
            }
        }))
    }

    async fn listen(
        &self,
        inner: &Inner,
        db: &PgPool,
        stop: &CancellationToken,
    ) -> Result<(), sqlx::Error> {
        let mut listener = PgListener::connect_with(db).await?;
        listener.eager_reconnect(false);
        listener.listen(CHANNEL).await?;
        // Anything revoked before LISTEN took effect is in the database: start empty.
        self.flush();
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut in_flight: Option<JoinHandle<()>> = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = ping.tick() => {
                    if in_flight.as_ref().is_none_or(|t| t.is_finished()) {
                        in_flight = Some(tokio::spawn(send_ping(db.clone(), inner.ping_payload())));
                    }
                }
                received = listener.try_recv() => match received? {
                    Some(n) => self.apply(inner, n.payload()),
                    None => return Err(sqlx::Error::Protocol("listener connection closed".into())),
                },
            }
        }
    }

    fn apply(&self, inner: &Inner, payload: &str) {
        if let Some(rest) = payload.strip_prefix("ping:") {
            if let Some((nonce, issued)) = rest.split_once(':')
                && nonce == inner.nonce
                && let Ok(issued) = issued.parse::<u64>()
            {
                inner.heard.fetch_max(issued, Ordering::AcqRel);
            }
            return;
        }
        let mut hash = [0u8; 32];
        match hex::decode_to_slice(payload, &mut hash) {
            Ok(()) => self.invalidate(&hash),
            Err(_) => self.flush(),
        }
    }
}

impl Inner {
    fn now_mark(&self, now: Instant) -> u64 {
        now.duration_since(self.epoch).as_millis() as u64 + 1
    }

    fn trusted(&self, now: Instant) -> bool {
        let heard = self.heard.load(Ordering::Acquire);
        heard != 0 && self.now_mark(now).saturating_sub(heard) <= TRUST_WINDOW.as_millis() as u64
    }

    fn ping_payload(&self) -> String {
        format!("ping:{}:{}", self.nonce, self.now_mark(Instant::now()))
    }
}

async fn send_ping(db: PgPool, payload: String) {
    let sent = sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(payload)
        .execute(&db);
    // A ping that cannot go out simply is not heard; the cache stops being trusted.
    let _ = tokio::time::timeout(TRUST_WINDOW, sent).await;
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CachedKey {
        CachedKey {
            key_id: 7,
            account_id: 42,
            policy: None,
            used: Arc::default(),
        }
    }

    fn heard_now(cache: &KeyCache) {
        let inner = cache.inner.as_ref().unwrap();
        let payload = inner.ping_payload();
        cache.apply(inner, &payload);
    }

    #[test]
    fn nothing_is_served_before_the_listener_is_heard() {
        let cache = KeyCache::new(10);
        cache.insert(cache.ticket(), [1; 32], key());
        assert_eq!(cache.get(&[1; 32]), None);
        heard_now(&cache);
        assert_eq!(cache.get(&[1; 32]), Some(key()));
    }

    #[test]
    fn trust_lapses_when_no_ping_comes_back() {
        let cache = KeyCache::new(10);
        heard_now(&cache);
        let inner = cache.inner.as_ref().unwrap();
        let later = Instant::now() + TRUST_WINDOW + Duration::from_millis(50);
        assert!(inner.trusted(Instant::now()));
        assert!(!inner.trusted(later));
    }

    #[test]
    fn other_replicas_pings_prove_nothing() {
        let cache = KeyCache::new(10);
        let inner = cache.inner.as_ref().unwrap();
        cache.apply(inner, "ping:someoneelse:99999999");
        assert!(!cache.trusted());
    }

    #[test]
    fn a_notified_hash_is_forgotten_and_garbage_flushes_everything() {
        let cache = KeyCache::new(10);
        heard_now(&cache);
        cache.insert(cache.ticket(), [1; 32], key());
        cache.insert(cache.ticket(), [2; 32], key());
        let inner = cache.inner.as_ref().unwrap();
        cache.apply(inner, &hex::encode([1u8; 32]));
        assert_eq!(cache.get(&[1; 32]), None);
        assert_eq!(cache.get(&[2; 32]), Some(key()));
        cache.apply(inner, "not a hash");
        assert!(cache.is_empty());
    }

    #[test]
    fn a_lookup_that_raced_an_invalidation_is_not_cached() {
        let cache = KeyCache::new(10);
        heard_now(&cache);
        let ticket = cache.ticket();
        cache.invalidate(&[9; 32]);
        cache.insert(ticket, [1; 32], key());
        assert_eq!(cache.get(&[1; 32]), None);
    }

    #[test]
    fn a_full_cache_starts_over_rather_than_growing() {
        let cache = KeyCache::new(2);
        cache.insert(cache.ticket(), [1; 32], key());
        cache.insert(cache.ticket(), [2; 32], key());
        cache.insert(cache.ticket(), [3; 32], key());
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn unknown_hashes_are_remembered_for_a_few_seconds_and_bounded() {
        let cache = KeyCache::new(10);
        let now = Instant::now();
        assert!(!cache.is_known_unknown(&[1; 32], now));
        cache.remember_unknown([1; 32], now);
        assert!(cache.is_known_unknown(&[1; 32], now + UNKNOWN_TTL - Duration::from_millis(1)));
        assert!(!cache.is_known_unknown(&[1; 32], now + UNKNOWN_TTL));
        for i in 0..MAX_UNKNOWN as u32 + 5 {
            let mut hash = [0u8; 32];
            hash[..4].copy_from_slice(&i.to_be_bytes());
            cache.remember_unknown(hash, now);
        }
        let held = read(&cache.inner.as_ref().unwrap().unknown).len();
        assert!(held <= MAX_UNKNOWN, "{held}");
        assert!(!KeyCache::disabled().is_known_unknown(&[1; 32], now));
    }

    #[test]
    fn a_disabled_cache_holds_nothing() {
        let cache = KeyCache::disabled();
        cache.insert(cache.ticket(), [1; 32], key());
        assert_eq!(cache.get(&[1; 32]), None);
        assert!(!cache.trusted());
    }
}
