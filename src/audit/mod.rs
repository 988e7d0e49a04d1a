//! The audit log (the `audit_event` table, SPEC §19): every change of an account's keys,
//! subscriptions, top-ups, redemptions and payments, with who asked and from where.
//!
//! A change records its row with [`record`] on the connection of its own transaction,
//! so a change that fails leaves no row and a committed one always has its row. Who
//! asked travels down from the face as an [`Origin`] (the actor and the client address);
//! what the row says is an [`Entry`]. The rows are append-only (the V20 trigger refuses
//! every update and delete) and never hold a secret. [`read`] pages them newest first
//! for the admin and account APIs, the console and the portal.
//!
//! A leaf of the domain: it imports no face and no other domain, so the accounts and
//! usage domains both record through it.

pub mod entry;
pub mod read;

pub use entry::{Action, Actor, Cause, Entry, Origin, Target, record};
pub use read::{AuditEvent, AuditPage, Filter, latest, page};
