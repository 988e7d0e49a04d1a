//! The runtimes that serve public connections: one current-thread runtime per core, each
//! on a thread of its own, started once per process and kept for its lifetime.
//!
//! The accept loop hands every accepted connection to the next of them in turn, and the
//! connection lives there to its end: its requests, its HTTP/2 streams, its timers and the
//! upstream connections its calls open (each worker serves a router with an upstream pool
//! of its own). So a call's tasks wake each other on one thread, with no work stealing
//! between cores and no cross-core wake-up per call; the background (accounting, marker
//! sync, listeners) stays on the runtime that called [`super::run`].
//!
//! The runtimes outlive every gateway of the process on purpose: a database connection a
//! request opened is registered with its worker's reactor and may be used after the
//! listener closed (the accounting drain), so the reactor must still be running then.

use std::num::NonZeroUsize;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle};

static WORKERS: OnceLock<Vec<Handle>> = OnceLock::new();

/// The worker runtimes, started on first use: one per core this process may use. Empty
/// when none could be started (the caller then serves on its own runtime).
pub fn handles() -> &'static [Handle] {
    WORKERS.get_or_init(|| {
        (0..cores())
            .filter_map(|index| match start(index) {
                Ok(handle) => Some(handle),
                Err(e) => {
                    tracing::warn!(index, error = %e, "cannot start a connection worker");
                    None
                }
            })
            .collect()
    })
}

/// The cores this process may use.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

fn start(index: usize) -> std::io::Result<Handle> {
    let runtime = Builder::new_current_thread().enable_all().build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name(format!("tollgate-http-{index}"))
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_a_worker_per_core_and_each_runs_what_it_is_given() {
        let workers = handles();
        assert_eq!(workers.len(), cores());
        for worker in workers {
            let (tx, rx) = std::sync::mpsc::channel();
            worker.spawn(async move {
                tokio::task::yield_now().await;
                tx.send(std::thread::current().name().map(str::to_owned))
                    .unwrap();
            });
            let name = rx.recv().unwrap().unwrap();
            assert!(name.starts_with("tollgate-http-"), "{name}");
        }
    }
}
