//! Which process delivers webhooks: the holder of `notification_lease` (migration V11);
//! the same lease, over its own table, elects the meter exporter (V15).
//!
//! A lease row with an expiry rather than an advisory lock: it needs no connection
//! pinned for the process's lifetime (it works through a transaction-pooling proxy),
//! and a holder that stalls or loses the network loses the lease after
//! `notify.lease_ttl_ms`, instead of whenever TCP notices the dead session. The holder
//! renews it before every round of attempts; a stopped process gives it up at once.
//! Every attempt ends within `notify.timeout_ms`, which validation keeps well under the
//! lease's life, so a lease passes to another process only after its last holder's
//! attempts are over (unless that holder stalled for longer than the whole lease).

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

/// A single-row lease table (`id boolean`, `holder uuid`, `expires_at timestamptz`).
/// The same mechanism elects the webhook deliverer and the meter exporter (V15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    table: &'static str,
}

/// Which process delivers threshold webhooks.
pub const DELIVERY: Lease = Lease {
    table: "notification_lease",
};

/// Which process exports usage to Stripe (SPEC §14).
pub const METER_EXPORT: Lease = Lease {
    table: "meter_export_lease",
};

impl Lease {
    /// Takes or renews the lease for `process`; `false` while another process holds it.
    pub async fn hold(
        self,
        db: &PgPool,
        process: Uuid,
        ttl: Duration,
    ) -> Result<bool, sqlx::Error> {
        let table = self.table;
        let held: Option<bool> = sqlx::query_scalar(&format!(
            "INSERT INTO {table} (id, holder, expires_at)
             VALUES (true, $1, now() + make_interval(secs => $2))
             ON CONFLICT (id) DO UPDATE
                SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
              WHERE {table}.holder = EXCLUDED.holder
                 OR {table}.expires_at <= now()
             RETURNING true"
        ))
        .bind(process)
        .bind(ttl.as_secs_f64())
        .fetch_optional(db)
        .await?;
        Ok(held.unwrap_or(false))
    }

    /// Gives the lease up (on shutdown), so another process takes over at its next look.
    pub async fn release(self, db: &PgPool, process: Uuid) -> Result<(), sqlx::Error> {
        sqlx::query(&format!(
            "UPDATE {} SET expires_at = now() WHERE holder = $1",
            self.table
        ))
        .bind(process)
        .execute(db)
        .await?;
        Ok(())
    }
}

/// Takes or renews the delivery lease for `process`; `false` while another holds it.
pub async fn hold(db: &PgPool, process: Uuid, ttl: Duration) -> Result<bool, sqlx::Error> {
    DELIVERY.hold(db, process, ttl).await
}

/// Gives the delivery lease up (on shutdown).
pub async fn release(db: &PgPool, process: Uuid) -> Result<(), sqlx::Error> {
    DELIVERY.release(db, process).await
}
