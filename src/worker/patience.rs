//! Recording outcomes through an outage: a live worker waits the database out rather than give up on
//! its own rows.

use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::service::{sleep_or_stop, unless_stopped};

/// Runs `op` until it succeeds or fails for good, waiting out transient failures (a database outage)
/// with a backoff up to 5 s. Used to record outcomes: a live worker that gave up would leave its own rows
/// `running` under the token of a live process, which no reaper may touch. Only a hard stop ends the
/// patience (the worker is exiting; its claims are then recovered like any dead claimant's).
pub(super) async fn patiently<T, F, Fut>(
    hard_stop: &CancellationToken,
    what: &str,
    mut op: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut patience = Patience::new(hard_stop);
    loop {
        let Some(result) = unless_stopped(hard_stop, op()).await else {
            return Err(Error::Io {
                context: format!("recording {what}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the database did not answer while stopping",
                ),
            });
        };
        match result {
            Err(e) if patience.wait_after(&e, what).await => {}
            other => return other,
        }
    }
}

/// The waiting of [`patiently`], for loops that cannot hand it a closure.
pub(super) struct Patience<'a> {
    hard_stop: &'a CancellationToken,
    backoff: Backoff,
}

impl<'a> Patience<'a> {
    pub(super) fn new(hard_stop: &'a CancellationToken) -> Self {
        Self {
            hard_stop,
            backoff: Backoff::RETRY,
        }
    }

    /// After a failure to record `what`: true, after a pause, when it is worth trying again.
    pub(super) async fn wait_after(&mut self, e: &Error, what: &str) -> bool {
        if !e.is_transient() || self.hard_stop.is_cancelled() {
            return false;
        }
        let wait = self.backoff.next_delay();
        warn!(error = %e, retry_in = ?wait, "cannot record {what} yet; retrying");
        sleep_or_stop(wait, self.hard_stop).await;
        true
    }
}
