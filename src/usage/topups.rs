//! One-off top-ups (SPEC §6): credit an operator adds to an account, spent only once
//! the month's allowance is used up (see [`super::spending::spend_credits`]).

use chrono::{DateTime, Utc};
use serde_json::json;

use super::announce::announce;
use super::report::standings;
use super::subscriptions::{ActivationError, Allocation, lock_account};
use crate::audit::{self, Action, Entry, Origin, Target};
use crate::month::Month;

/// A stored top-up.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TopUp {
    pub id: i64,
    pub account_id: i64,
    pub calls: i64,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A top-up as the console lists it: what was granted, what is left, and when.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TopUpRow {
    pub id: i64,
    pub calls: i64,
    pub remaining: i64,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// The account's top-ups, newest first, at most `limit`.
pub async fn topups_of(
    conn: &mut sqlx::PgConnection,
    account_id: i64,
    limit: i64,
) -> Result<Vec<TopUpRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, calls, remaining, expires_at, created_at FROM credit_grant
         WHERE account_id = $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(account_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

impl Allocation {
    /// Adds `calls` units of credit valid until `expires_at` (or for ever), recorded in
    /// the audit log as `origin`'s `grant.added` in the same transaction. Like an
    /// activation it takes the account's row lock, and an account that has units again
    /// gets its markers removed at once.
    #[tracing::instrument(skip_all, fields(account_id = account_id))]
    pub async fn add_credit(
        &self,
        account_id: i64,
        calls: i64,
        expires_at: Option<DateTime<Utc>>,
        origin: Origin,
        now: DateTime<Utc>,
    ) -> Result<TopUp, ActivationError> {
        let mut tx = self.db.begin().await?;
        lock_account(&mut tx, account_id).await?;
        let topup: TopUp = sqlx::query_as(
            "INSERT INTO credit_grant (account_id, calls, remaining, expires_at)
             VALUES ($1, $2, $2, $3)
             RETURNING id, account_id, calls, expires_at",
        )
        .bind(account_id)
        .bind(calls)
        .bind(expires_at)
        .fetch_one(&mut *tx)
        .await?;
        let entry = Entry {
            account_id,
            action: Action::GrantAdded,
            target: Target::Grant(topup.id),
            detail: json!({"calls": topup.calls, "expires_at": topup.expires_at}),
        };
        audit::record(&mut tx, origin, &entry).await?;
        let month = Month::containing(now);
        let standing = standings(&mut tx, &[account_id], month, now, self.free_monthly_calls)
            .await?
            .into_iter()
            .next()
            .filter(|_| self.metering);
        announce(&mut tx, self.quota.replica(), &[account_id]).await?;
        tx.commit().await?;
        self.settle(standing.as_ref(), account_id, now);
        tracing::info!(grant_id = topup.id, calls, "top-up added");
        Ok(topup)
    }
}
