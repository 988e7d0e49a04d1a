//! Shared test support: a fresh PostgreSQL database per test (`db`), the real gateway
//! started on port 0 against a recording local upstream (`app`), requests to it and
//! the check of a JSON error (`http`), and waiting for asynchronous effects (`wait`).
//! What only one topic needs lives in that topic's module.

mod app;
mod db;
mod http;
mod process;
mod wait;

pub use app::*;
pub use db::*;
pub use http::*;
pub use process::*;
pub use wait::*;
