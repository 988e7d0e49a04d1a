//! Locking a std `Mutex` whose holder panicked: the data is still used, since every
//! critical section in tollgate leaves it consistent (single inserts and removals).
//! Never held across an `.await`.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
