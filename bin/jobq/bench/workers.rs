//! What the drains and the other sections' workers share: the no-op kind the drains run, and the
//! connection budget that sizes each worker's pool. A leaf of its own so that the sections that start
//! workers (the backlog, the process drain) need not import the drain section, whose report imports
//! theirs.

use super::Settings;

pub(crate) const KIND: &str = "bench.noop";

/// Connections the bench lets all workers of one measurement open together. The binary sizes a worker's
/// pool by [`jobq::WorkerConfig::pool_size`]; the bench caps the sum so that a sweep of 4 workers stays well inside a
/// default `max_connections` (151) on a server other clients share.
const CONNECTION_BUDGET: u32 = 96;

/// Pool size of each of `s.workers` workers.
pub(crate) fn pool_size(s: Settings) -> u32 {
    let needed = jobq::WorkerConfig {
        concurrency: s.concurrency,
        ..Default::default()
    }
    .pool_size();
    needed.min(CONNECTION_BUDGET / s.workers.max(1))
}
