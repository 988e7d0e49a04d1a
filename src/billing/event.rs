//! Stripe events as this gateway reads them (SPEC §11): the envelope
//! `{"id": "evt_…", "type": "…", "data": {"object": {…}}}` and the three types that
//! change a subscription. Pure; every field read is named here and unit-tested.
//!
//! - `checkout.session.completed`: `client_reference_id` (the account id, as text),
//!   `metadata.plan` (a catalogue name), `customer` (may be null) and `payment_status`:
//!   only `paid` and `no_payment_required` are paid (Stripe's fulfilment guidance); a
//!   delayed method is paid by `checkout.session.async_payment_succeeded` for the same
//!   session, and `checkout.session.async_payment_failed` pays nothing.
//! - `invoice.paid`: `customer`, the first line's price — `lines.data[0].price.id`, or
//!   `lines.data[0].pricing.price_details.price` in API versions from 2025-03-31 on —
//!   and its `period.start` / `period.end` (unix seconds).
//! - `customer.subscription.deleted`: `customer` and `ended_at` (unix seconds).
//!
//! Expandable ids (`customer`, a price) are read whether Stripe sent the id or the
//! expanded object.

use chrono::{DateTime, Utc};
use serde_json::Value;

pub const CHECKOUT_COMPLETED: &str = "checkout.session.completed";
pub const CHECKOUT_ASYNC_SUCCEEDED: &str = "checkout.session.async_payment_succeeded";
pub const CHECKOUT_ASYNC_FAILED: &str = "checkout.session.async_payment_failed";
pub const INVOICE_PAID: &str = "invoice.paid";
pub const SUBSCRIPTION_DELETED: &str = "customer.subscription.deleted";

/// What every event has.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub id: String,
    pub kind: String,
    pub object: Value,
}

impl Envelope {
    /// Reads the envelope; `None` when the body is not a Stripe event at all.
    pub fn parse(body: &[u8]) -> Option<Self> {
        let mut value: Value = serde_json::from_slice(body).ok()?;
        let id = text(value.get("id"))?;
        let kind = text(value.get("type"))?;
        let object = value.get_mut("data")?.get_mut("object")?.take();
        Some(Self { id, kind, object })
    }

    /// The metric label of the type: one of the three read, else `other`.
    pub fn type_label(&self) -> &'static str {
        match self.kind.as_str() {
            CHECKOUT_COMPLETED => CHECKOUT_COMPLETED,
            CHECKOUT_ASYNC_SUCCEEDED => CHECKOUT_ASYNC_SUCCEEDED,
            CHECKOUT_ASYNC_FAILED => CHECKOUT_ASYNC_FAILED,
            INVOICE_PAID => INVOICE_PAID,
            SUBSCRIPTION_DELETED => SUBSCRIPTION_DELETED,
            _ => "other",
        }
    }

    /// The event's meaning, or what is missing from it.
    pub fn read(&self) -> Result<Event, &'static str> {
        let o = &self.object;
        match self.kind.as_str() {
            CHECKOUT_COMPLETED | CHECKOUT_ASYNC_SUCCEEDED => Ok(Event::Checkout(Checkout {
                account_ref: text(o.get("client_reference_id")),
                plan: text(o.pointer("/metadata/plan")),
                customer: id_of(o.get("customer")),
                paid: matches!(
                    o.get("payment_status").and_then(Value::as_str),
                    Some("paid" | "no_payment_required")
                ),
            })),
            CHECKOUT_ASYNC_FAILED => Ok(Event::PaymentFailed),
            INVOICE_PAID => {
                let customer = id_of(o.get("customer")).ok_or("invoice without customer")?;
                let line = o.pointer("/lines/data/0").ok_or("invoice without lines")?;
                let price_id = id_of(line.get("price"))
                    .or_else(|| id_of(line.pointer("/pricing/price_details/price")))
                    .ok_or("invoice line without price")?;
                let start = instant(line.pointer("/period/start")).ok_or("bad period start")?;
                let end = instant(line.pointer("/period/end")).ok_or("bad period end")?;
                if end <= start {
                    return Err("invoice period ends before it starts");
                }
                Ok(Event::InvoicePaid(InvoicePaid {
                    customer,
                    price_id,
                    start,
                    end,
                }))
            }
            SUBSCRIPTION_DELETED => Ok(Event::SubscriptionDeleted(SubscriptionDeleted {
                customer: id_of(o.get("customer")).ok_or("subscription without customer")?,
                ended_at: instant(o.get("ended_at")).ok_or("subscription without ended_at")?,
            })),
            _ => Ok(Event::Other),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Checkout(Checkout),
    InvoicePaid(InvoicePaid),
    SubscriptionDeleted(SubscriptionDeleted),
    /// A checkout's delayed payment failed: nothing is activated.
    PaymentFailed,
    Other,
}

/// A completed checkout session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// `client_reference_id`: the account id, as the checkout was created with it.
    pub account_ref: Option<String>,
    /// `metadata.plan`: a catalogue plan name.
    pub plan: Option<String>,
    pub customer: Option<String>,
    /// Whether `payment_status` says the session is paid (`paid` or
    /// `no_payment_required`); an unpaid session activates nothing.
    pub paid: bool,
}

/// A paid invoice: `[start, end)` of the plan its first line's price pays for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvoicePaid {
    pub customer: String,
    pub price_id: String,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// A Stripe subscription that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionDeleted {
    pub customer: String,
    pub ended_at: DateTime<Utc>,
}

/// A non-blank string PostgreSQL can store (no NUL).
fn text(value: Option<&Value>) -> Option<String> {
    value
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty() && !s.contains('\0'))
        .map(str::to_owned)
}

/// An expandable reference: the id itself, or the expanded object's `id`.
fn id_of(value: Option<&Value>) -> Option<String> {
    let value = value?;
    text(Some(value)).or_else(|| text(value.get("id")))
}

/// Unix seconds as an instant PostgreSQL can store.
fn instant(value: Option<&Value>) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(value?.as_i64()?, 0).filter(|t| crate::month::storable(*t))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn envelope(kind: &str, object: Value) -> Envelope {
        let body = json!({"id": "evt_1", "object": "event", "type": kind,
                          "data": {"object": object}});
        Envelope::parse(body.to_string().as_bytes()).unwrap()
    }

    fn at(unix: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(unix, 0).unwrap()
    }

    #[test]
    fn a_body_without_id_type_or_object_is_not_an_event() {
        assert!(Envelope::parse(b"not json").is_none());
        assert!(Envelope::parse(br#"{"type": "x", "data": {"object": {}}}"#).is_none());
        assert!(Envelope::parse(br#"{"id": "evt_1", "data": {"object": {}}}"#).is_none());
        assert!(Envelope::parse(br#"{"id": "evt_1", "type": "x"}"#).is_none());
    }

    #[test]
    fn a_checkout_names_account_plan_and_customer() {
        let e = envelope(
            CHECKOUT_COMPLETED,
            json!({"object": "checkout.session", "client_reference_id": "42",
                   "customer": "cus_A", "metadata": {"plan": "pro"}}),
        );
        assert_eq!(
            e.read(),
            Ok(Event::Checkout(Checkout {
                account_ref: Some("42".into()),
                plan: Some("pro".into()),
                customer: Some("cus_A".into()),
                paid: false,
            }))
        );
        let bare = envelope(CHECKOUT_COMPLETED, json!({"customer": null}));
        assert_eq!(
            bare.read(),
            Ok(Event::Checkout(Checkout {
                account_ref: None,
                plan: None,
                customer: None,
                paid: false,
            }))
        );
    }

    #[test]
    fn only_a_paid_or_free_session_is_paid() {
        let session = |kind, status: Value| {
            let e = envelope(
                kind,
                json!({"client_reference_id": "42", "payment_status": status}),
            );
            match e.read() {
                Ok(Event::Checkout(c)) => c.paid,
                other => panic!("{other:?}"),
            }
        };
        assert!(session(CHECKOUT_COMPLETED, json!("paid")));
        assert!(session(CHECKOUT_COMPLETED, json!("no_payment_required")));
        assert!(!session(CHECKOUT_COMPLETED, json!("unpaid")));
        assert!(!session(CHECKOUT_COMPLETED, json!(null)));
        assert!(session(CHECKOUT_ASYNC_SUCCEEDED, json!("paid")));
        let failed = envelope(CHECKOUT_ASYNC_FAILED, json!({"payment_status": "unpaid"}));
        assert_eq!(failed.read(), Ok(Event::PaymentFailed));
        assert_eq!(failed.type_label(), CHECKOUT_ASYNC_FAILED);
    }

    #[test]
    fn an_invoice_reads_its_first_lines_price_and_period() {
        let e = envelope(
            INVOICE_PAID,
            json!({"customer": {"id": "cus_A", "object": "customer"},
                   "lines": {"data": [
                       {"price": {"id": "price_pro"}, "period": {"start": 1000, "end": 2000}},
                       {"price": {"id": "price_other"}, "period": {"start": 0, "end": 1}}]}}),
        );
        assert_eq!(
            e.read(),
            Ok(Event::InvoicePaid(InvoicePaid {
                customer: "cus_A".into(),
                price_id: "price_pro".into(),
                start: at(1000),
                end: at(2000),
            }))
        );
    }

    #[test]
    fn an_invoice_of_the_newer_api_reads_pricing_price_details() {
        let e = envelope(
            INVOICE_PAID,
            json!({"customer": "cus_A", "lines": {"data": [
                {"pricing": {"type": "price_details",
                             "price_details": {"price": "price_pro", "product": "prod_1"}},
                 "period": {"start": 1000, "end": 2000}}]}}),
        );
        assert!(matches!(e.read(), Ok(Event::InvoicePaid(i)) if i.price_id == "price_pro"));
    }

    #[test]
    fn an_invoice_without_customer_price_or_sane_period_is_malformed() {
        let line = |period: Value| json!({"price": {"id": "p"}, "period": period});
        for object in [
            json!({"lines": {"data": [line(json!({"start": 1, "end": 2}))]}}),
            json!({"customer": "cus_A", "lines": {"data": []}}),
            json!({"customer": "cus_A", "lines": {"data": [{"period": {"start": 1, "end": 2}}]}}),
            json!({"customer": "cus_A", "lines": {"data": [line(json!({"start": 2, "end": 2}))]}}),
            json!({"customer": "cus_A", "lines": {"data": [line(json!({"start": "1", "end": 2}))]}}),
        ] {
            assert!(
                envelope(INVOICE_PAID, object.clone()).read().is_err(),
                "{object}"
            );
        }
    }

    #[test]
    fn a_deleted_subscription_reads_customer_and_ended_at() {
        let e = envelope(
            SUBSCRIPTION_DELETED,
            json!({"object": "subscription", "customer": "cus_A", "ended_at": 1500,
                   "status": "canceled"}),
        );
        assert_eq!(
            e.read(),
            Ok(Event::SubscriptionDeleted(SubscriptionDeleted {
                customer: "cus_A".into(),
                ended_at: at(1500),
            }))
        );
        let open = envelope(
            SUBSCRIPTION_DELETED,
            json!({"customer": "cus_A", "ended_at": null}),
        );
        assert!(open.read().is_err());
    }

    #[test]
    fn other_types_are_read_as_other_and_labelled_so() {
        let e = envelope("customer.created", json!({}));
        assert_eq!(e.read(), Ok(Event::Other));
        assert_eq!(e.type_label(), "other");
        assert_eq!(envelope(INVOICE_PAID, json!({})).type_label(), INVOICE_PAID);
    }
}
