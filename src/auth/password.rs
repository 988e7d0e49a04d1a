//! Password hashing with argon2id.
//!
//! Hashing is deliberately slow (and takes ~19 MiB), so it runs on the blocking pool,
//! never stalls the async workers, and at most two hashes per core run at once: a
//! signup or login flood queues instead of exhausting memory. A login for an unknown email still verifies against a fixed dummy
//! hash so the answer takes as long as for a known one.

use std::sync::LazyLock;

use anyhow::Context;
use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use tokio::sync::Semaphore;

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

static SLOTS: LazyLock<Semaphore> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    Semaphore::new(cores * 2)
});

/// The argon2id PHC string of `password`.
pub async fn hash(password: String) -> anyhow::Result<String> {
    let _slot = SLOTS.acquire().await.context("password slots closed")?;
    tokio::task::spawn_blocking(move || hash_blocking(&password))
        .await
        .context("password hashing task failed")?
}

/// Whether `password` matches `phc`; `None` verifies against a dummy and returns false.
pub async fn verify(password: String, phc: Option<String>) -> anyhow::Result<bool> {
    let _slot = SLOTS.acquire().await.context("password slots closed")?;
    tokio::task::spawn_blocking(move || match phc {
        Some(phc) => verify_blocking(&password, &phc),
        None => {
            verify_blocking(&password, &DUMMY_HASH);
            false
        }
    })
    .await
    .context("password verification task failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_and_nothing_else() {
        let phc = hash("correct horse".into()).await.unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(
            verify("correct horse".into(), Some(phc.clone()))
                .await
                .unwrap()
        );
        assert!(!verify("wrong horse".into(), Some(phc)).await.unwrap());
        assert!(!verify("anything".into(), None).await.unwrap());
    }
}
