//! tollgate: the account backend and metering gateway of a paid HTTP API.
//!
//! The crate is organised by concept, and a request walks downhill through it:
//! [`startup`] wires everything and serves [`http::router`] through [`server`] (the
//! listener and its connection limits); [`http`] routes to [`account`] and [`admin`]
//! (the JSON APIs), [`console`] (the operators' web pages), [`portal`] (the customers'
//! web pages, built from the console's pieces), [`billing`] (payment
//! webhooks) and [`proxy`] (metered forwarding); those rely on [`auth`] (who is
//! calling), [`accounts`] (keys, sign-up, codes), [`audit`] (the audit log every change
//! of an account is recorded in) and [`usage`] (the usage domain: every quota decision at request time, and,
//! in [`usage::accounting`], the usage events the proxy publishes recorded in the ledger
//! under the same rules).
//! Both tell [`throttle`] (admission and exhaustion markers) what to mark, and the
//! throttler alone talks to [`cloudflare`] (the KV REST client); accounting also
//! records threshold events in [`notify`]'s outbox, which delivers them to the
//! operator's webhook.
//! [`state`], [`error`] (with [`rejection`]), [`request_id`], [`month`], [`config`], [`db`], [`nats`] and
//! [`telemetry`] are leaves every layer may use. [`reload`] puts a configuration read
//! again in force in the services that hold its reloadable parts (SPEC §20).
//! `main.rs` only parses the command line and calls [`startup`].

pub mod account;
pub mod accounts;
pub mod admin;
pub mod audit;
pub mod auth;
pub mod billing;
pub mod client_ip;
pub mod cloudflare;
pub mod config;
pub mod console;
pub mod db;
pub mod error;
pub mod export;
pub mod http;
pub mod json_number;
pub mod month;
pub mod nats;
pub mod notify;
pub mod plan;
pub mod portal;
#[cfg(test)]
mod prop_support;
pub mod proxy;
pub mod rejection;
pub mod reload;
pub mod request_id;
pub mod server;
pub mod startup;
pub mod state;
pub mod sync;
pub mod telemetry;
pub mod throttle;
pub mod usage;
pub mod web;

pub use config::Config;
pub use http::router;
pub use startup::{Gateway, Worker, serve};
pub use state::AppState;
