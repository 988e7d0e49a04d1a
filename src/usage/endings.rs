//! Ending subscriptions early (a cancelled payment, SPEC §11), through the allocation
//! service like every other change of an account's standing.
//!
//! A subscription ends at `min(expires_at, ended_at)`; one that had not begun by
//! `ended_at` ends at its own start, an empty interval that is never active. The free
//! grant of the current month is ensured, so an account whose paid plan just ended
//! falls back to it at once, and its markers follow (written when the free grant is
//! used up already). Each subscription that ends earlier than it did gets its audit
//! row, as the cause says, in the same transaction.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgConnection;

use super::rules::Standing;
use super::subscriptions::{ActivationError, Allocation, lock_account};
use crate::audit::{self, Cause, Target};

impl Allocation {
    /// Ends the account's subscriptions `subscription_ids` at `ended_at` (never later
    /// than they end already) inside the caller's transaction; returns how many
    /// changed and the account's standing now. Each one changed is recorded as `cause`
    /// says. The caller commits, then calls [`Allocation::settle`].
    #[tracing::instrument(skip_all, fields(account_id = account_id))]
    pub async fn end_in(
        &self,
        tx: &mut PgConnection,
        account_id: i64,
        subscription_ids: &[i64],
        ended_at: DateTime<Utc>,
        cause: &Cause,
        now: DateTime<Utc>,
    ) -> Result<(u64, Option<Standing>), ActivationError> {
        lock_account(&mut *tx, account_id).await?;
        let changed: Vec<(i64, DateTime<Utc>)> = sqlx::query_as(
            "UPDATE subscription
             SET expires_at = greatest(starts_at, $3)
             WHERE account_id = $1 AND id = ANY($2)
               AND (expires_at IS NULL OR expires_at > greatest(starts_at, $3))
             RETURNING id, expires_at",
        )
        .bind(account_id)
        .bind(subscription_ids)
        .bind(ended_at)
        .fetch_all(&mut *tx)
        .await?;
        for (id, expires_at) in &changed {
            let detail = json!({"expires_at": expires_at});
            let entry = cause.entry(account_id, Target::Subscription(*id), detail);
            audit::record(&mut *tx, cause.origin, &entry).await?;
        }
        let ended = changed.len() as u64;

        let standing = self.restand(&mut *tx, account_id, now, |_| false).await?;
        tracing::info!(ended, %ended_at, "subscriptions ended early");
        Ok((ended, standing))
    }
}
