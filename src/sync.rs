//! One way to take a lock in jobq.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking over a lock whose last holder panicked. Every lock in jobq guards bookkeeping
/// that a panic leaves whole (a set of process groups, a map of outcomes, a timestamp): refusing it
/// after a handler's panic would turn one failed job into a worker that can no longer finish any.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
