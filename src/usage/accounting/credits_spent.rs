//! The units top-up credit paid for, per account and UTC month (`usage_counter.
//! credits_spent`, V15): the CSV export's `credits_spent` column (SPEC §14).
//!
//! The ledger calls [`record`] once per batch, in its transaction, with what the batch's
//! credit spending took; a batch that spent no credit costs no statement.

use chrono::{DateTime, Utc};

/// Adds `(account_id, month_start, units)` to the months' counters (rows the batch has
/// just bumped, so they exist).
pub(super) async fn record(
    conn: &mut sqlx::PgConnection,
    paid: &[(i64, DateTime<Utc>, i64)],
) -> Result<(), sqlx::Error> {
    if paid.is_empty() {
        return Ok(());
    }
    let accounts: Vec<i64> = paid.iter().map(|p| p.0).collect();
    let months: Vec<DateTime<Utc>> = paid.iter().map(|p| p.1).collect();
    let units: Vec<i64> = paid.iter().map(|p| p.2).collect();
    sqlx::query(
        "UPDATE usage_counter c SET credits_spent = c.credits_spent + s.units
         FROM (SELECT account_id, month_start, sum(units)::bigint AS units
               FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[])
                    AS p(account_id, month_start, units)
               GROUP BY 1, 2) s
         WHERE c.account_id = s.account_id AND c.month_start = s.month_start",
    )
    .bind(accounts)
    .bind(months)
    .bind(units)
    .execute(conn)
    .await?;
    Ok(())
}
