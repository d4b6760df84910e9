//! [`keep_alive`]: restarts an in-process service (a reaper or scheduler beside the workers) that stops.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::backoff::Backoff;
use crate::error::{Error, Result};

/// An in-process service that ran this long before it stopped is restarted at once, not after a grown
/// backoff: it was working.
const SERVICE_STABLE_AFTER: Duration = Duration::from_secs(60);

/// Runs an in-process service (a reaper or scheduler beside the workers) until `shutdown`, starting
/// it again when it returns, fails or panics before that: a service that died at a bad moment must not
/// stay down, unnoticed, until the supervisor exits. Restarts wait `restart_after`, doubling up to a
/// minute while it keeps failing.
pub fn keep_alive<F, Fut>(
    name: &'static str,
    restart_after: Duration,
    shutdown: CancellationToken,
    make: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut backoff = Backoff::restart(restart_after);
        loop {
            let started = Instant::now();
            // A panic is an error like any other here: "<name> panicked: <message>".
            let outcome = tokio::spawn(make())
                .await
                .unwrap_or_else(|join| Err(Error::task_failed(name, join)));
            if shutdown.is_cancelled() {
                if let Err(e) = outcome {
                    error!(service = name, error = %e, "service failed while stopping");
                }
                return;
            }
            if started.elapsed() >= SERVICE_STABLE_AFTER {
                backoff.reset();
            }
            let wait = backoff.next_delay();
            match outcome {
                Ok(()) => {
                    warn!(service = name, retry_in = ?wait, "service stopped on its own; starting it again")
                }
                Err(e) => {
                    error!(service = name, error = %e, retry_in = ?wait, "service failed; starting it again")
                }
            }
            if crate::service::sleep_or_stop(wait, &shutdown).await {
                return;
            }
        }
    })
}
