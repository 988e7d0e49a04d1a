//! The integration tests, one binary: the real gateway on port 0 against real
//! PostgreSQL (a fresh database per test), a local upstream and a local Cloudflare KV
//! server. Shared support is in `common`; each topic keeps its own helpers.
//!
//! `tests/streaming.rs` stays a binary of its own: it measures the process's peak
//! memory, which other tests in the same process would disturb.

mod accounts;
mod analytics;
mod audit;
mod billing;
mod budgets;
mod common;
mod config;
mod console;
mod export;
mod jetstream;
mod key_cache;
mod key_limits;
mod layout;
mod lifecycle;
mod notify;
mod plans;
mod portal;
mod proxy;
mod readme;
mod reload;
mod server;
mod telemetry;
mod throttle;
mod usage;
