//! Password hashing with argon2id, behind a gate that bounds its cost.
//!
//! A hash is deliberately slow and takes ~19 MiB ([`argon2::Params::DEFAULT_M_COST`]), so
//! it runs on the blocking pool, never on the async workers. [`Passwords`] lets at most
//! [`max_concurrent_hashes`] (two per core) run at once and at most [`WAITING_PER_SLOT`]
//! times that many callers wait for a turn; anyone beyond is refused at once with
//! [`PasswordError::Busy`] (`503` with `Retry-After`), so a flood is a short queue, not
//! an unbounded line. The turn (a semaphore permit) belongs to the blocking job, not to
//! the request: a client that disconnects mid-hash drops its request future, but the
//! hash it started keeps its turn until it finishes, so disconnecting clients cannot
//! start more hashes than the bound (SPEC §9). A caller that disconnects while waiting
//! simply leaves the queue.
//!
//! A login for an unknown email still verifies against a fixed dummy hash so the answer
//! takes as long as for a known one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use anyhow::Context;
use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::telemetry::RateLimitedLog;

/// Callers allowed to wait per hashing slot.
pub const WAITING_PER_SLOT: usize = 4;

/// One warning per interval while callers are refused.
static BUSY_LOG: LazyLock<RateLimitedLog> = LazyLock::new(RateLimitedLog::default);

/// Hash compared against when the email is unknown, to keep timing uniform.
static DUMMY_HASH: LazyLock<String> =
    LazyLock::new(|| hash_blocking("not a real password").expect("hashing a constant cannot fail"));

fn hash_blocking(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("argon2 hashing failed: {e}"))
}

fn verify_blocking(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Hashes run at once on this machine: two per core.
pub fn max_concurrent_hashes() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()) * 2
}

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    /// Every slot is busy and the waiting line is full.
    #[error("too many password checks in progress")]
    Busy,
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl From<PasswordError> for ApiError {
    fn from(e: PasswordError) -> Self {
        match e {
            PasswordError::Busy => ApiError::Overloaded,
            PasswordError::Failed(e) => ApiError::Internal(e),
        }
    }
}

/// The gate every password hash and verification passes. Cheap to clone.
#[derive(Clone)]
pub struct Passwords {
    gate: Arc<Gate>,
}

struct Gate {
    slots: Arc<Semaphore>,
    /// The runtime whose blocking pool runs the jobs: the one that made the gate, so
    /// calls served on different connection workers share one pool, and the slots bound
    /// its threads too (each runtime would otherwise keep threads of its own).
    runtime: Option<tokio::runtime::Handle>,
    max_waiting: usize,
    waiting: AtomicUsize,
}

/// A place in the waiting line, given back when dropped (also when the caller is).
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Default for Passwords {
    /// [`max_concurrent_hashes`] slots, [`WAITING_PER_SLOT`] waiting callers per slot.
    fn default() -> Self {
        let slots = max_concurrent_hashes();
        Self::new(slots, slots * WAITING_PER_SLOT)
    }
}

impl Passwords {
    pub fn new(slots: usize, max_waiting: usize) -> Self {
        Self {
            gate: Arc::new(Gate {
                slots: Arc::new(Semaphore::new(slots.max(1))),
                runtime: tokio::runtime::Handle::try_current().ok(),
                max_waiting,
                waiting: AtomicUsize::new(0),
            }),
        }
    }

    /// The argon2id PHC string of `password`.
    pub async fn hash(&self, password: String) -> Result<String, PasswordError> {
        self.run(move || hash_blocking(&password))
            .await?
            .map_err(PasswordError::Failed)
    }

    /// Whether `password` matches `phc`; `None` verifies against a dummy and returns false.
    pub async fn verify(
        &self,
        password: String,
        phc: Option<String>,
    ) -> Result<bool, PasswordError> {
        self.run(move || match phc {
            Some(phc) => verify_blocking(&password, &phc),
            None => {
                verify_blocking(&password, &DUMMY_HASH);
                false
            }
        })
        .await
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.gate.slots.available_permits()
    }

    /// Runs `job` on the gate's blocking pool once a slot is free; the job holds the slot
    /// until it returns, whatever happens to the caller.
    async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PasswordError> {
        let permit = self.permit().await?;
        let job = move || {
            let _slot = permit;
            job()
        };
        match &self.gate.runtime {
            Some(runtime) => runtime.spawn_blocking(job),
            None => tokio::task::spawn_blocking(job),
        }
        .await
        .context("password hashing task failed")
        .map_err(PasswordError::Failed)
    }

    async fn permit(&self) -> Result<OwnedSemaphorePermit, PasswordError> {
        let gate = &self.gate;
        if let Ok(permit) = Arc::clone(&gate.slots).try_acquire_owned() {
            return Ok(permit);
        }
        if gate.waiting.fetch_add(1, Ordering::AcqRel) >= gate.max_waiting {
            gate.waiting.fetch_sub(1, Ordering::AcqRel);
            metrics::counter!("tollgate_password_refused_total").increment(1);
            if BUSY_LOG.allow() {
                tracing::warn!(
                    suppressed = BUSY_LOG.take_suppressed(),
                    "password hashing busy: request refused with 503"
                );
            }
            return Err(PasswordError::Busy);
        }
        let _place = Place(&gate.waiting);
        Arc::clone(&gate.slots)
            .acquire_owned()
            .await
            .context("password slots closed")
            .map_err(PasswordError::Failed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_and_nothing_else() {
        let passwords = Passwords::default();
        let phc = passwords.hash("correct horse".into()).await.unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(
            passwords
                .verify("correct horse".into(), Some(phc.clone()))
                .await
                .unwrap()
        );
        assert!(
            !passwords
                .verify("wrong horse".into(), Some(phc))
                .await
                .unwrap()
        );
        assert!(!passwords.verify("anything".into(), None).await.unwrap());
    }

    /// A job that runs until told to stop, saying when it has started.
    fn held_job(
        passwords: Passwords,
    ) -> (
        mpsc::Sender<()>,
        mpsc::Receiver<()>,
        impl std::future::Future<Output = Result<(), PasswordError>>,
    ) {
        let (release, wait) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<()>();
        let run = async move {
            passwords
                .run(move || {
                    started_tx.send(()).unwrap();
                    let _ = wait.recv();
                })
                .await
        };
        (release, started, run)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_keeps_its_slot_after_its_caller_is_gone() {
        let passwords = Passwords::new(1, 1);
        let (release, started, run) = held_job(passwords.clone());
        let caller = tokio::spawn(run);
        started.recv_timeout(Duration::from_secs(5)).unwrap();
        caller.abort();
        let _ = caller.await;
        assert_eq!(
            passwords.available(),
            0,
            "the running hash still holds its slot"
        );
        release.send(()).unwrap();
        for _ in 0..100 {
            if passwords.available() == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the slot came back when the job finished");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_waiting_line_callers_are_refused_at_once() {
        let passwords = Passwords::new(1, 1);
        let (release, started, run) = held_job(passwords.clone());
        let holder = tokio::spawn(run);
        started.recv_timeout(Duration::from_secs(5)).unwrap();

        let waiter = tokio::spawn({
            let passwords = passwords.clone();
            async move { passwords.run(|| ()).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused = passwords.run(|| ()).await;
        assert!(matches!(refused, Err(PasswordError::Busy)), "{refused:?}");

        // A waiter that gives up frees its place in the line.
        waiter.abort();
        let _ = waiter.await;
        let again = tokio::spawn({
            let passwords = passwords.clone();
            async move { passwords.run(|| 7).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.send(()).unwrap();
        holder.await.unwrap().unwrap();
        assert_eq!(again.await.unwrap().unwrap(), 7);
    }
}
