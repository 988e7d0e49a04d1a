//! A local stand-in for Cloudflare's Workers KV REST API, for tests, demos and benchmarks.
//!
//! `FakeKv` serves one account and one namespace on 127.0.0.1 with the real contract:
//! bearer-token auth, raw values on read, JSON envelopes everywhere else, 404 code 10009 for
//! a missing key, expirations refused under 60 s, cursor paging of sorted key listings, bulk
//! write and delete. Keys expire by the wall clock. Every request is recorded, and a
//! [`Fault`] can make every later answer a 500, a 429 or a slow one. It depends on nothing
//! in this crate, so it can serve any client.

mod api;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running fake KV server; it stops when dropped.
pub struct FakeKv {
    addr: SocketAddr,
    shared: Shared,
    server: JoinHandle<()>,
}

/// A failure injected into every later answer, until replaced (`Fault::None` clears it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Fault {
    #[default]
    None,
    /// 500 with an envelope, code 10001.
    ServerError,
    /// 429 with an envelope, code 971, and `Retry-After` when given.
    RateLimited { retry_after_secs: Option<u64> },
    /// Answer normally after the delay.
    Delay(Duration),
}

/// One request as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    pub method: String,
    /// Percent-decoded path below the namespace, e.g. `/values/usage-exhausted:42:1764547200`
    /// or `/keys`; the whole decoded path when the request was not for a namespace.
    pub path: String,
    /// The raw query string.
    pub query: Option<String>,
}

impl FakeKv {
    pub const ACCOUNT_ID: &'static str = "test-account";
    pub const NAMESPACE_ID: &'static str = "test-namespace";
    pub const API_TOKEN: &'static str = "test-token";

    /// Starts a fake on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start() -> FakeKv {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("the fake KV binds a free port on 127.0.0.1");
        Self::start_on(listener).await
    }

    /// Starts a fake serving `listener`.
    ///
    /// # Panics
    /// When the listener has no local address.
    pub async fn start_on(listener: TcpListener) -> FakeKv {
        let addr = listener
            .local_addr()
            .expect("the fake KV listener has a local address");
        let shared = Arc::new(Store::default());
        let app = api::router(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "fake KV server stopped");
            }
        });
        FakeKv {
            addr,
            shared,
            server,
        }
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API root to configure a client with, e.g. `http://127.0.0.1:PORT/client/v4`.
    pub fn api_base(&self) -> String {
        format!("http://{}/client/v4", self.addr)
    }

    /// Makes every later answer fail as `fault` says, until set again.
    pub fn set_fault(&self, fault: Fault) {
        self.shared.lock().fault = fault;
    }

    /// Every request received so far, in order, faulted ones included.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.shared.lock().calls.clone()
    }

    /// Every request received so far with the instant it arrived, in order.
    pub fn timed_calls(&self) -> Vec<(Instant, RecordedCall)> {
        let state = self.shared.lock();
        state
            .call_times
            .iter()
            .copied()
            .zip(state.calls.iter().cloned())
            .collect()
    }

    /// Forgets the recorded requests.
    pub fn clear_calls(&self) {
        let mut state = self.shared.lock();
        state.calls.clear();
        state.call_times.clear();
    }

    /// Stores a value directly, without the API's validation (a past expiration is allowed
    /// and makes the key invisible).
    pub fn insert(&self, key: &str, value: &str, expiration: Option<i64>) {
        let entry = Entry {
            value: value.as_bytes().to_vec(),
            expiration,
        };
        self.shared.lock().entries.insert(key.to_owned(), entry);
    }

    /// The live value of `key` (lossily decoded as UTF-8) and its expiration.
    pub fn value(&self, key: &str) -> Option<(String, Option<i64>)> {
        let state = self.shared.lock();
        let entry = state.entries.get(key).filter(|e| e.is_live(unix_now()))?;
        Some((
            String::from_utf8_lossy(&entry.value).into_owned(),
            entry.expiration,
        ))
    }

    /// Every live key, sorted.
    pub fn keys(&self) -> Vec<String> {
        let now = unix_now();
        let state = self.shared.lock();
        let live = state.entries.iter().filter(|(_, e)| e.is_live(now));
        live.map(|(name, _)| name.clone()).collect()
    }
}

impl Drop for FakeKv {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Default)]
struct Store {
    state: Mutex<StoreState>,
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, StoreState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct StoreState {
    entries: BTreeMap<String, Entry>,
    fault: Fault,
    calls: Vec<RecordedCall>,
    /// When each of `calls` arrived.
    call_times: Vec<Instant>,
}

struct Entry {
    value: Vec<u8>,
    expiration: Option<i64>,
}

impl Entry {
    fn is_live(&self, now: i64) -> bool {
        self.expiration.is_none_or(|at| at > now)
    }
}

/// The state handlers share.
type Shared = Arc<Store>;

pub(super) fn unix_now() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX)
}
