//! What a worker did: counted while it runs, reported when it stops.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of what a worker did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Rows claimed.
    pub claimed: u64,
    /// Jobs finished done.
    pub done: u64,
    /// Jobs failed and scheduled for another attempt.
    pub retried: u64,
    /// Jobs that ended dead.
    pub dead: u64,
    /// Jobs cancelled by an operator while they ran.
    pub cancelled: u64,
    /// Jobs handed back on shutdown.
    pub released: u64,
    /// Jobs whose handler asked to run again later (a snooze; the attempt is not counted).
    pub snoozed: u64,
    /// Jobs whose row was taken away from this worker: stopped as soon as that was seen, or refused
    /// at the finish.
    pub lost: u64,
    /// Jobs stopped by the self-fence (the worker could not confirm it was alive).
    pub fenced: u64,
    /// Claims that failed after their internal retries (each one logged).
    pub claim_errors: u64,
}

crate::counts::counters!(WorkerReport {
    claimed,
    done,
    retried,
    dead,
    cancelled,
    released,
    snoozed,
    lost,
    fenced,
    claim_errors
});

/// The live counts behind a [`WorkerReport`], bumped by the claim loop and the job tasks.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(super) claimed: AtomicU64,
    /// Shared with the registration's heartbeat, which adds it to `jobq_done_minutes`.
    pub(super) done: std::sync::Arc<AtomicU64>,
    pub(super) retried: AtomicU64,
    pub(super) dead: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) released: AtomicU64,
    pub(super) snoozed: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) fenced: AtomicU64,
    pub(super) claim_errors: AtomicU64,
}

impl Counters {
    pub(super) fn report(&self) -> WorkerReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerReport {
            claimed: g(&self.claimed),
            done: g(&self.done),
            retried: g(&self.retried),
            dead: g(&self.dead),
            cancelled: g(&self.cancelled),
            released: g(&self.released),
            snoozed: g(&self.snoozed),
            lost: g(&self.lost),
            fenced: g(&self.fenced),
            claim_errors: g(&self.claim_errors),
        }
    }
}
