//! Tests that measure the process's memory, in a binary of their own so that no other
//! test shares the process; within it they run one at a time, each from a reset peak.
//! It runs with the production allocator.

#[path = "../integration/common/db.rs"]
mod db;

mod app;
mod export;
mod hashing;
mod streaming;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
