//! What a worker has done, as counts a test can wait on instead of sleeping (the `test-util` feature
//! only: without it none of this is compiled, and the worker records nothing). Tests reach it as
//! `jobq::testing::Signals`, from [`Worker::signals`](super::Worker::signals).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// What one worker has done so far (see [`Signals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Claim passes made: each time the claim loop looked for work across its queues (the claim
    /// statements, or only the idle probe when it saw nothing due), whatever came of it.
    pub claims: u64,
    /// The rows those passes claimed.
    pub claimed: u64,
    /// Idle waits begun: each time the worker, with nothing it may claim, began to wait for due work
    /// (the server-side wait, or the sleep standing in for it). An idle wait that ends with nothing due
    /// is followed by the next, so two more of them mean that it has looked for work again and found
    /// none it may claim.
    pub idle_waits: u64,
    /// How long the last idle wait begun may last (the waits double up to the poll interval).
    pub idle_wait: Duration,
}

/// One worker's [`Counts`], kept up to date as it works, for tests to wait on: "two more claim passes",
/// "idle again". Cloning gives another handle on the same counts.
#[derive(Debug, Clone)]
pub struct Signals(Arc<watch::Sender<Counts>>);

impl Default for Signals {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(Counts::default())))
    }
}

impl Signals {
    /// The counts now.
    pub fn now(&self) -> Counts {
        *self.0.borrow()
    }

    /// Waits until `done` holds for the counts, and returns them.
    ///
    /// # Panics
    /// After `timeout`, naming `what` and the counts.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&Counts) -> bool,
    ) -> Counts {
        let mut rx = self.0.subscribe();
        match tokio::time::timeout(timeout, rx.wait_for(|c| done(c))).await {
            Ok(Ok(counts)) => *counts,
            Ok(Err(_)) => unreachable!("the sender lives as long as self"),
            Err(_) => panic!(
                "timed out after {timeout:?} waiting for {what}: {:?}",
                self.now()
            ),
        }
    }

    /// Records an event.
    pub(crate) fn record(&self, event: impl FnOnce(&mut Counts)) {
        self.0.send_modify(event);
    }
}
