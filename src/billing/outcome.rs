//! What became of a Stripe event: recorded with it, answered to Stripe, and counted in
//! `tollgate_billing_events_total{type, outcome}`.

use serde::Serialize;

/// The outcome of one delivery. Only [`Outcome::Duplicate`] is never recorded (the
/// first delivery's outcome stands).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A subscription was activated.
    Activated,
    /// An invoice of a customer not known yet, kept until its checkout arrives; or a
    /// checkout whose payment has not arrived yet (a delayed method).
    Pending,
    /// A checkout's delayed payment failed; nothing was activated.
    PaymentFailed,
    /// Subscriptions (or pending invoices) were ended early.
    Ended,
    /// A type this gateway does not act on.
    #[default]
    Ignored,
    /// This event id was processed before; nothing changed.
    Duplicate,
    UnknownAccount,
    UnknownCustomer,
    UnknownPlan,
    /// A known type without the fields it needs.
    Malformed,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Activated => "activated",
            Outcome::Pending => "pending",
            Outcome::PaymentFailed => "payment_failed",
            Outcome::Ended => "ended",
            Outcome::Ignored => "ignored",
            Outcome::Duplicate => "duplicate",
            Outcome::UnknownAccount => "unknown_account",
            Outcome::UnknownCustomer => "unknown_customer",
            Outcome::UnknownPlan => "unknown_plan",
            Outcome::Malformed => "malformed",
        }
    }

    /// Whether the event asked for something that could not be done (logged as a
    /// warning: an operator should look at the payment).
    pub fn is_unapplied(self) -> bool {
        matches!(
            self,
            Outcome::UnknownAccount
                | Outcome::UnknownCustomer
                | Outcome::UnknownPlan
                | Outcome::Malformed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_the_serialized_names() {
        for outcome in [
            Outcome::Activated,
            Outcome::Pending,
            Outcome::PaymentFailed,
            Outcome::Ended,
            Outcome::Ignored,
            Outcome::Duplicate,
            Outcome::UnknownAccount,
            Outcome::UnknownCustomer,
            Outcome::UnknownPlan,
            Outcome::Malformed,
        ] {
            let json = serde_json::to_value(outcome).unwrap();
            assert_eq!(json, outcome.label());
        }
    }
}
