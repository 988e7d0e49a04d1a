//! tollgate: the account backend and metering gateway of a paid HTTP API.
//!
//! The crate is organised by concept: [`account`] and [`admin`] serve the JSON APIs (with [`key_cache`] in front of key lookups),
//! [`proxy`] forwards metered calls, [`usage`] owns every quota decision, [`throttle`]
//! owns admission and exhaustion markers, and [`cloudflare`] is the KV REST client.
//! `main.rs` only parses the command line and calls [`app`].

pub mod account;
pub mod admin;
pub mod app;
pub mod cloudflare;
pub mod config;
pub mod db;
pub mod error;
pub mod http;
pub mod key_cache;
pub mod month;
pub mod proxy;
pub mod telemetry;
pub mod testkit;
pub mod throttle;
pub mod usage;

pub use app::{AppState, Gateway, serve};
pub use config::Config;
pub use http::router;
