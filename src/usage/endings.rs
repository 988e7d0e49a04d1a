//! Ending subscriptions early (a cancelled payment, SPEC §11), through the allocation
//! service like every other change of an account's standing.
//!
//! A subscription ends at `min(expires_at, ended_at)`; one that had not begun by
//! `ended_at` ends at its own start, an empty interval that is never active. The free
//! grant of the current month is ensured, so an account whose paid plan just ended
//! falls back to it at once, and its markers follow (written when the free grant is
//! used up already).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::rules::Standing;
use super::subscriptions::{ActivationError, Allocation, lock_account};

impl Allocation {
    /// Ends the account's subscriptions `subscription_ids` at `ended_at` (never later
    /// than they end already) inside the caller's transaction; returns how many
    /// changed and the account's standing now. The caller commits, then calls
    /// [`Allocation::settle`].
    #[tracing::instrument(skip_all, fields(account_id = account_id))]
    pub async fn end_in(
        &self,
        tx: &mut PgConnection,
        account_id: i64,
        subscription_ids: &[i64],
        ended_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<(u64, Option<Standing>), ActivationError> {
        lock_account(&mut *tx, account_id).await?;
        let ended = sqlx::query(
            "UPDATE subscription
             SET expires_at = greatest(starts_at, $3)
             WHERE account_id = $1 AND id = ANY($2)
               AND (expires_at IS NULL OR expires_at > greatest(starts_at, $3))",
        )
        .bind(account_id)
        .bind(subscription_ids)
        .bind(ended_at)
        .execute(&mut *tx)
        .await?
        .rows_affected();

        let standing = self.restand(&mut *tx, account_id, now, |_| false).await?;
        tracing::info!(ended, %ended_at, "subscriptions ended early");
        Ok((ended, standing))
    }
}
