//! The Cloudflare call budget of one API token, counted in PostgreSQL for every process.
//!
//! Cloudflare's limit is per token, shared by every replica and worker; a per-process
//! budget would let R processes spend R budgets. `kv_budget` keeps, per token, when each
//! call of the last window was allowed. One `UPDATE … RETURNING` takes a permit: it drops
//! the stamps older than the window and appends one only while fewer than `max_calls`
//! (less the caller's reserve) remain. The row lock serializes processes, and PostgreSQL
//! re-checks the condition on the row as the previous holder left it, so no two processes
//! can take the last permit. Time is the database's, the one clock every process shares.
//!
//! A database that cannot answer refuses the permit: the fleet's bound holds, and the
//! marker operation fails open like any other KV failure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::cloudflare::SharedBudget;
use crate::telemetry::RateLimitedLog;

/// The fleet's budget on one token: at most `max_calls` calls in any `window`.
pub struct PgCallBudget {
    db: PgPool,
    token_id: String,
    max_calls: u32,
    window: Duration,
    /// Whether this process has made sure the token's row exists.
    ready: AtomicBool,
    log: RateLimitedLog,
}

impl PgCallBudget {
    pub fn new(db: PgPool, api_token: &SecretString, max_calls: u32, window: Duration) -> Self {
        Self {
            db,
            token_id: token_id(api_token),
            max_calls,
            window,
            ready: AtomicBool::new(false),
            log: RateLimitedLog::default(),
        }
    }

    async fn take(&self, reserve: u32) -> Result<bool, sqlx::Error> {
        if !self.ready.load(Ordering::Relaxed) {
            sqlx::query("INSERT INTO kv_budget (token_id) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(&self.token_id)
                .execute(&self.db)
                .await?;
            self.ready.store(true, Ordering::Relaxed);
        }
        let granted: Option<i32> = sqlx::query_scalar(
            r#"
            UPDATE kv_budget
               SET granted = ARRAY(SELECT g FROM unnest(granted) AS g
                                    WHERE g > now() - make_interval(secs => $2))
                             || now()
             WHERE token_id = $1
               AND (SELECT count(*) FROM unnest(granted) AS g
                     WHERE g > now() - make_interval(secs => $2)) + $3 < $4
            RETURNING cardinality(granted)
            "#,
        )
        .bind(&self.token_id)
        .bind(self.window.as_secs_f64())
        .bind(i64::from(reserve))
        .bind(i64::from(self.max_calls))
        .fetch_optional(&self.db)
        .await?;
        Ok(granted.is_some())
    }
}

#[async_trait::async_trait]
impl SharedBudget for PgCallBudget {
    async fn try_acquire_leaving(&self, reserve: u32) -> bool {
        match self.take(reserve).await {
            Ok(granted) => granted,
            Err(e) => {
                if self.log.allow() {
                    tracing::warn!(error = %e, suppressed = self.log.take_suppressed(),
                        "the fleet's KV call budget cannot be read; call not sent");
                }
                false
            }
        }
    }
}

impl std::fmt::Debug for PgCallBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCallBudget")
            .field("token_id", &self.token_id)
            .field("max_calls", &self.max_calls)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// Names a token without revealing it: the first 16 hex digits of its SHA-256.
fn token_id(api_token: &SecretString) -> String {
    let digest = Sha256::digest(api_token.expose_secret().as_bytes());
    hex::encode(&digest[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_named_by_its_hash_never_by_itself() {
        let id = token_id(&SecretString::from("test-token"));
        assert_eq!(id.len(), 16);
        assert!(!id.contains("test-token"));
        assert_eq!(id, token_id(&SecretString::from("test-token")));
        assert_ne!(id, token_id(&SecretString::from("other-token")));
    }
}
