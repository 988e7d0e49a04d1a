//! What each Stripe event does, inside the transaction that records it (SPEC §11).
//!
//! Every activation goes through the allocation service ([`Allocation::activate_in`]),
//! every early end through [`Allocation::end_in`], each recorded in the audit log as
//! Stripe's (`payment.activated`, `subscription.ended`, naming the event and the
//! customer); the caller commits and then settles the standings collected in
//! [`Applied::settle`]. Events of one customer are serialized by a transaction-scoped
//! advisory lock on the customer id, taken before any account row lock: an
//! `invoice.paid` racing the checkout that maps its customer either sees the mapping or
//! leaves a pending invoice the checkout then sees.

use chrono::{DateTime, Months, Utc};
use sqlx::PgConnection;

use super::event::{Checkout, InvoicePaid, SubscriptionDeleted};
use super::outcome::Outcome;
use crate::audit::{Action, Cause, Origin};
use crate::config::{PlanConfig, Plans};
use crate::usage::Standing;
use crate::usage::subscriptions::{ActivationError, Allocation, NewSubscription};

/// What an event did: its outcome, who it concerned, and the standings to settle
/// once the transaction commits.
#[derive(Debug, Default)]
pub struct Applied {
    pub outcome: Outcome,
    pub customer: Option<String>,
    pub account_id: Option<i64>,
    pub settle: Vec<(i64, Option<Standing>)>,
}

/// The services an event may use.
pub struct Billing<'a> {
    /// The catalogue as it stood when the event arrived.
    pub plans: &'a Plans,
    pub allocation: &'a Allocation,
    /// Stripe, from the address the event came from.
    pub origin: Origin,
    pub now: DateTime<Utc>,
}

/// Advisory-lock namespace of Stripe customers (the two-key form; key 2 is the hash).
const CUSTOMER_LOCK_SPACE: i32 = 0x5354_5250; // "STRP"

async fn lock_customer(tx: &mut PgConnection, customer: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(CUSTOMER_LOCK_SPACE)
        .bind(customer)
        .execute(tx)
        .await?;
    Ok(())
}

fn subscription(
    plan: &PlanConfig,
    starts_at: DateTime<Utc>,
    ends: DateTime<Utc>,
) -> NewSubscription {
    NewSubscription {
        plan: plan.name.clone(),
        monthly_allowance: plan.monthly_allowance,
        starts_at,
        expires_at: Some(ends),
        daily_allowance: plan.daily_allowance,
        enforcement: plan.enforcement,
        terms: plan.terms(),
    }
}

impl Billing<'_> {
    /// What the audit log records of event `event_id` of `customer` doing `action`.
    fn cause(&self, action: Action, event_id: &str, customer: Option<&str>) -> Cause {
        self.origin
            .cause(action)
            .with("event_id", event_id)
            .with("customer", customer)
    }

    /// Activates `new` for the account, paid by event `event_id`, and records the
    /// customer on it.
    async fn activate(
        &self,
        tx: &mut PgConnection,
        account_id: i64,
        customer: Option<&str>,
        new: &NewSubscription,
        event_id: &str,
        applied: &mut Applied,
    ) -> Result<(), ActivationError> {
        let cause = self.cause(Action::PaymentActivated, event_id, customer);
        let activated = self
            .allocation
            .activate_in(tx, account_id, new, &cause, self.now)
            .await?;
        sqlx::query("UPDATE subscription SET stripe_customer = $1 WHERE id = $2")
            .bind(customer)
            .bind(activated.subscription.id)
            .execute(&mut *tx)
            .await?;
        applied.settle.push((account_id, activated.standing));
        Ok(())
    }

    /// `checkout.session.completed`: a month of `metadata.plan` from now for the
    /// account `client_reference_id`, and its customer remembered for that account
    /// (with the customer's pending invoices applied).
    pub async fn checkout(
        &self,
        tx: &mut PgConnection,
        event_id: &str,
        checkout: &Checkout,
    ) -> Result<Applied, ActivationError> {
        let customer = checkout.customer.as_deref();
        let mut applied = Applied {
            customer: checkout.customer.clone(),
            ..Applied::default()
        };
        // Fulfilled only once paid: a delayed method's session completes unpaid and is
        // paid by its `async_payment_succeeded` event.
        if !checkout.paid {
            applied.outcome = Outcome::Pending;
            return Ok(applied);
        }
        if let Some(customer) = customer {
            lock_customer(tx, customer).await?;
        }
        let account_id: Option<i64> = checkout.account_ref.as_deref().and_then(|r| r.parse().ok());
        let exists: Option<i64> = match account_id {
            Some(id) => {
                sqlx::query_scalar("SELECT id FROM account WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
            }
            None => None,
        };
        let Some(account_id) = exists else {
            applied.outcome = Outcome::UnknownAccount;
            return Ok(applied);
        };
        applied.account_id = Some(account_id);

        let plan = checkout.plan.as_deref().and_then(|p| self.plans.plan(p));
        applied.outcome = match plan {
            Some(plan) => {
                let ends = self
                    .now
                    .checked_add_months(Months::new(1))
                    .expect("a month after now is a valid instant");
                let new = subscription(plan, self.now, ends);
                self.activate(tx, account_id, customer, &new, event_id, &mut applied)
                    .await?;
                Outcome::Activated
            }
            None => Outcome::UnknownPlan,
        };

        if let Some(customer) = customer {
            let mapped: i64 = sqlx::query_scalar(
                "WITH new AS (
                     INSERT INTO stripe_customer (customer, account_id) VALUES ($1, $2)
                     ON CONFLICT (customer) DO NOTHING RETURNING account_id)
                 SELECT account_id FROM new
                 UNION ALL SELECT account_id FROM stripe_customer WHERE customer = $1
                 LIMIT 1",
            )
            .bind(customer)
            .bind(account_id)
            .fetch_one(&mut *tx)
            .await?;
            if mapped == account_id {
                self.apply_pending(tx, customer, account_id, &mut applied)
                    .await?;
            } else {
                tracing::warn!(
                    customer,
                    account_id,
                    mapped,
                    "stripe customer already pays for another account; its invoices stay there"
                );
            }
        }
        Ok(applied)
    }

    /// Applies the customer's invoices that arrived before its checkout.
    async fn apply_pending(
        &self,
        tx: &mut PgConnection,
        customer: &str,
        account_id: i64,
        applied: &mut Applied,
    ) -> Result<(), ActivationError> {
        let pending: Vec<(String, String, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
            "SELECT event_id, price_id, period_start, period_end FROM stripe_pending_invoice
             WHERE customer = $1 AND applied_at IS NULL ORDER BY period_start, event_id",
        )
        .bind(customer)
        .fetch_all(&mut *tx)
        .await?;
        for (event_id, price_id, start, end) in pending {
            let outcome = match self.plans.plan_by_price(&price_id) {
                // A cancellation that came first may have emptied the period.
                Some(_) if end <= start => Outcome::Ended,
                Some(plan) => {
                    let new = subscription(plan, start, end);
                    self.activate(tx, account_id, Some(customer), &new, &event_id, applied)
                        .await?;
                    Outcome::Activated
                }
                None => Outcome::UnknownPlan,
            };
            sqlx::query(
                "WITH done AS (UPDATE stripe_pending_invoice SET applied_at = $2
                               WHERE event_id = $1)
                 UPDATE stripe_event SET outcome = $3, account_id = $4 WHERE id = $1",
            )
            .bind(&event_id)
            .bind(self.now)
            .bind(outcome.label())
            .bind(account_id)
            .execute(&mut *tx)
            .await?;
            tracing::info!(
                event_id,
                outcome = outcome.label(),
                "pending invoice applied"
            );
        }
        Ok(())
    }

    /// `invoice.paid`: the plan of the first line's price for the line's period, for
    /// the customer's account; kept pending while the customer is unknown.
    pub async fn invoice_paid(
        &self,
        tx: &mut PgConnection,
        event_id: &str,
        invoice: &InvoicePaid,
    ) -> Result<Applied, ActivationError> {
        let customer = invoice.customer.as_str();
        lock_customer(tx, customer).await?;
        let mut applied = Applied {
            customer: Some(invoice.customer.clone()),
            ..Applied::default()
        };
        let Some(plan) = self.plans.plan_by_price(&invoice.price_id) else {
            applied.outcome = Outcome::UnknownPlan;
            return Ok(applied);
        };
        let account_id: Option<i64> =
            sqlx::query_scalar("SELECT account_id FROM stripe_customer WHERE customer = $1")
                .bind(customer)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(account_id) = account_id else {
            sqlx::query(
                "INSERT INTO stripe_pending_invoice
                     (event_id, customer, price_id, period_start, period_end)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(event_id)
            .bind(customer)
            .bind(&invoice.price_id)
            .bind(invoice.start)
            .bind(invoice.end)
            .execute(&mut *tx)
            .await?;
            applied.outcome = Outcome::Pending;
            return Ok(applied);
        };
        applied.account_id = Some(account_id);
        let new = subscription(plan, invoice.start, invoice.end);
        self.activate(tx, account_id, Some(customer), &new, event_id, &mut applied)
            .await?;
        applied.outcome = Outcome::Activated;
        Ok(applied)
    }

    /// `customer.subscription.deleted`: every subscription the customer's events
    /// created ends at `ended_at`, and so do its pending invoices.
    pub async fn subscription_deleted(
        &self,
        tx: &mut PgConnection,
        event_id: &str,
        deleted: &SubscriptionDeleted,
    ) -> Result<Applied, ActivationError> {
        let customer = deleted.customer.as_str();
        lock_customer(tx, customer).await?;
        let mut applied = Applied {
            customer: Some(deleted.customer.clone()),
            ..Applied::default()
        };
        let pending = sqlx::query(
            "UPDATE stripe_pending_invoice
             SET period_end = greatest(period_start, least(period_end, $2))
             WHERE customer = $1 AND applied_at IS NULL",
        )
        .bind(customer)
        .bind(deleted.ended_at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT account_id, id FROM subscription WHERE stripe_customer = $1
             ORDER BY account_id, id",
        )
        .bind(customer)
        .fetch_all(&mut *tx)
        .await?;
        let mut accounts: Vec<i64> = rows.iter().map(|r| r.0).collect();
        accounts.dedup();
        let cause = self.cause(Action::SubscriptionEnded, event_id, Some(customer));
        for account_id in &accounts {
            let ids: Vec<i64> = rows
                .iter()
                .filter(|r| r.0 == *account_id)
                .map(|r| r.1)
                .collect();
            let (_, standing) = self
                .allocation
                .end_in(tx, *account_id, &ids, deleted.ended_at, &cause, self.now)
                .await?;
            applied.settle.push((*account_id, standing));
        }
        applied.account_id = accounts.first().copied();
        applied.outcome = if accounts.is_empty() && pending == 0 {
            Outcome::UnknownCustomer
        } else {
            Outcome::Ended
        };
        Ok(applied)
    }
}
