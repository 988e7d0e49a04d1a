//! How many gateway replicas are live, so each enforces its share of the fleet's rate
//! limits ([`super::rate`]).
//!
//! Every replica writes its heartbeat to `replica_presence` every [`BEAT_EVERY`] and
//! counts the replicas heard within [`LIVE_WITHIN`]; a replica that stops deletes its
//! row at once, one that dies stops being counted after [`LIVE_WITHIN`]. While the
//! database does not answer, the last count stands.

use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::rate::RateLimits;
use crate::telemetry::RateLimitedLog;

/// How often a replica says it is alive.
pub const BEAT_EVERY: Duration = Duration::from_secs(2);
/// A replica not heard this long is no longer counted.
pub const LIVE_WITHIN: Duration = Duration::from_secs(6);

/// Keeps `limits`' replica count until `stop`, then removes this replica's row.
pub fn start(
    db: PgPool,
    replica: Uuid,
    limits: RateLimits,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let log = RateLimitedLog::default();
        let mut tick = tokio::time::interval(BEAT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            match beat(&db, replica).await {
                Ok(live) => {
                    limits.set_replicas(u32::try_from(live).unwrap_or(u32::MAX));
                    metrics::gauge!("tollgate_live_replicas").set(live as f64);
                }
                Err(e) if log.allow() => {
                    tracing::warn!(error = %e, suppressed = log.take_suppressed(),
                        "replica heartbeat failed; rate limit shares keep the last count");
                }
                Err(_) => {}
            }
            limits.prune_full();
        }
        let _ = sqlx::query!("DELETE FROM replica_presence WHERE replica = $1", replica)
            .execute(&db)
            .await;
    })
}

/// Writes this replica's heartbeat and counts the live replicas (itself included).
async fn beat(db: &PgPool, replica: Uuid) -> Result<i64, sqlx::Error> {
    let live_within = LIVE_WITHIN.as_secs_f64();
    let mut tx = db.begin().await?;
    sqlx::query!(
        "INSERT INTO replica_presence (replica, seen_at) VALUES ($1, now())
         ON CONFLICT (replica) DO UPDATE SET seen_at = now()",
        replica,
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!("DELETE FROM replica_presence WHERE seen_at < now() - interval '1 hour'")
        .execute(&mut *tx)
        .await?;
    let live = sqlx::query_scalar!(
        r#"SELECT count(*) AS "live!" FROM replica_presence
           WHERE seen_at > now() - make_interval(secs => $1)"#,
        live_within,
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(live.max(1))
}
