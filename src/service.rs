//! One lifecycle for every long-running service (worker, reaper, scheduler, supervisor): wait out a
//! database that is not there yet, check the schema, register, heartbeat, run, deregister.
//!
//! Written once so that the services behave alike where it matters to an operator: each one started
//! before its database (a reboot where MariaDB comes up late) waits for it instead of exiting, so a
//! service manager never sees a crash loop; each one deregisters on the way out; each one's heartbeat
//! confirms its fence (see [`crate::claimant::fence`]). Maintenance services run their passes through
//! [`run_every`], which logs a pass at info level only when it did something.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use sqlx::MySqlPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::backoff::Backoff;
use crate::claimant::fence::Fence;
use crate::db::registry::{Bounds, Role};
use crate::error::{ConnectFailure, Error, Result};
use crate::session::Session;

/// Sleeps, or returns true early if `stop` is cancelled.
pub(crate) async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        biased;
        () = stop.cancelled() => true,
        () = tokio::time::sleep(d) => false,
    }
}

/// How long a stopping service still waits for one statement once it has been told to stop for good:
/// on a network that drops packets silently a statement can hang until TCP gives up (many minutes),
/// and a SIGTERM must not wait for that.
pub(crate) const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// Runs `fut` to its end, unless `stop` is cancelled and then [`STOP_PATIENCE`] passes first (`None`).
pub(crate) async fn unless_stopped<T>(
    stop: &CancellationToken,
    fut: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        r = fut => Some(r),
        () = async {
            stop.cancelled().await;
            tokio::time::sleep(STOP_PATIENCE).await;
        } => None,
    }
}

/// Errors that mean "the server is not there right now" rather than "this can never work".
pub(crate) fn is_outage(e: &Error) -> bool {
    match e {
        Error::Connect { kind, .. } => *kind == ConnectFailure::Unreachable,
        other => other.is_transient(),
    }
}

/// A registered service: its registry row, the heartbeat task that keeps it fresh, and its fence.
#[derive(Debug)]
pub(crate) struct Registration {
    /// Listed in [`registrations`] until the registration is closed or dropped.
    _listed: Listed,
    token: String,
    fence: Fence,
    beat_recorder: std::sync::Arc<std::sync::atomic::AtomicU64>,
    done_counter: std::sync::Arc<std::sync::atomic::AtomicU64>,
    beat_stop: CancellationToken,
    beat: JoinHandle<Session>,
    fence_stop: CancellationToken,
    watchdog: Option<std::thread::JoinHandle<()>>,
}

/// How a service registers.
#[derive(Debug, Clone)]
pub(crate) struct Register<'a> {
    pub(crate) role: Role,
    pub(crate) queues: &'a [String],
    /// The kinds it has handlers for (workers).
    pub(crate) kinds: &'a [String],
    pub(crate) bounds: Bounds,
    /// Wait out an unreachable database (forever services) rather than fail at once (one-shot runs).
    pub(crate) wait_for_database: bool,
    /// Run the fence's watchdog (services that run jobs), with what it calls when fenced jobs do not
    /// stop in time (see [`crate::claimant::fence::Fence::watch`]); `None`: no watchdog.
    pub(crate) watch_fence: Option<fn()>,
}

impl Register<'static> {
    /// How a service that claims no jobs (reaper, supervisor) registers: the default bounds, waiting for
    /// the database, no watchdog.
    pub(crate) fn service(role: Role) -> Self {
        Self {
            role,
            queues: &[],
            kinds: &[],
            bounds: Bounds::service(),
            wait_for_database: true,
            watch_fence: None,
        }
    }
}

impl Register<'_> {
    /// Checks the schema and registers, waiting for an unreachable database when asked to. `None` if
    /// `shutdown` came first.
    ///
    /// # Errors
    /// When the database is not migrated, refuses the login, or (without waiting) is unreachable.
    pub(crate) async fn open(
        &self,
        pool: &MySqlPool,
        shutdown: &CancellationToken,
    ) -> Result<Option<Registration>> {
        let mut backoff = Backoff::OUTAGE;
        let session = loop {
            let attempt = async {
                crate::db::migrate::ensure_migrated(pool).await?;
                Session::open(pool, self.role, self.queues, self.kinds, self.bounds).await
            }
            .await;
            match attempt {
                Ok(s) => break s,
                Err(e) if self.wait_for_database && is_outage(&e) => {
                    let wait = backoff.next_delay();
                    warn!(role = self.role.as_str(), error = %e, retry_in = ?wait, "database unavailable; waiting");
                    if sleep_or_stop(wait, shutdown).await {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let token = session.token().to_string();
        let fence = session.fence().clone();
        let beat_recorder = session.beat_recorder();
        let done_counter = session.done_counter();
        let fence_stop = CancellationToken::new();
        let watchdog = self
            .watch_fence
            .map(|last_resort| fence.watch(fence_stop.clone(), last_resort));
        let beat_stop = CancellationToken::new();
        let beat = tokio::spawn(session.heartbeat(beat_stop.clone()));
        Ok(Some(Registration {
            _listed: Listed::new(self.role, fence.clone()),
            token,
            fence,
            beat_recorder,
            done_counter,
            beat_stop,
            beat,
            fence_stop,
            watchdog,
        }))
    }
}

impl Registration {
    /// The claim token.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// The fence the heartbeat confirms.
    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }

    /// See [`Session::beat_recorder`].
    pub(crate) fn beat_recorder(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.beat_recorder.clone()
    }

    /// See [`Session::done_counter`].
    pub(crate) fn done_counter(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.done_counter.clone()
    }

    /// Stops the heartbeat and removes the registry row. A heartbeat task that panicked, or a database
    /// that does not answer within [`STOP_PATIENCE`], leaves the row to the reaper, which says so.
    pub(crate) async fn close(self, pool: &MySqlPool) {
        self.beat_stop.cancel();
        let closed = tokio::time::timeout(STOP_PATIENCE, async {
            match self.beat.await {
                Ok(session) => session.close(pool).await,
                Err(join) => {
                    warn!(error = %Error::task_failed("heartbeat", join), claim = %self.token,
                          "heartbeat task failed; the registry row is left to the reaper")
                }
            }
        })
        .await;
        if closed.is_err() {
            warn!(claim = %self.token, "the database did not answer; the registry row is left to the reaper");
        }
        self.fence_stop.cancel();
        if let Some(dog) = self.watchdog {
            let _ = tokio::task::spawn_blocking(move || dog.join()).await;
        }
    }
}

/// This process's open registrations, for [`registrations`]: a number for each, its role, its fence.
static LISTED: std::sync::Mutex<Vec<(u64, Role, Fence)>> = std::sync::Mutex::new(Vec::new());

/// One entry of [`LISTED`], removed when dropped.
#[derive(Debug)]
struct Listed(u64);

impl Listed {
    fn new(role: Role, fence: Fence) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock_listed().push((n, role, fence));
        Self(n)
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        lock_listed().retain(|(n, ..)| *n != self.0);
    }
}

fn lock_listed() -> std::sync::MutexGuard<'static, Vec<(u64, Role, Fence)>> {
    crate::sync::lock(&LISTED)
}

/// One registered service of this process, as a readiness probe sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationHealth {
    /// Its role: worker, reaper, scheduler, supervisor.
    pub role: &'static str,
    /// Whether its heartbeat has confirmed its registry row within its fence bound (the bound after
    /// which a reaper elsewhere may judge it gone), on a whole session.
    pub live: bool,
}

/// The services this process has registered and not yet deregistered (worker, reaper, scheduler,
/// supervisor), each with whether its registry row is live. Empty before the first registration (a
/// service waiting for its database) and after the last one closed. A readiness probe of a process that
/// runs services wants this non-empty and every entry live: a process whose heartbeat stopped reaching
/// its row is about to be judged dead by the reapers, and should not receive traffic or be counted on.
#[must_use]
pub fn registrations() -> Vec<RegistrationHealth> {
    lock_listed()
        .iter()
        .map(|(_, role, fence)| RegistrationHealth {
            role: role.as_str(),
            live: fence.is_confirmed(),
        })
        .collect()
}

/// What a maintenance pass reports: its counters, and whether it did anything worth an info line.
pub(crate) trait PassReport: crate::counts::Logged {
    /// True when the pass found nothing to do.
    fn is_quiet(&self) -> bool;
}

/// Runs `pass` every `interval` until `shutdown` is cancelled; a pass in progress always finishes.
/// A failed pass is logged and the next one tries again.
pub(crate) async fn run_every<R, F, Fut>(
    name: &str,
    interval: Duration,
    shutdown: &CancellationToken,
    mut pass: F,
) where
    R: PassReport,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R>>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match pass().await {
            Ok(r) => r.log(&format!("{name} pass"), r.is_quiet()),
            Err(e) => warn!(error = %e, retry_in = ?interval, "{name} pass failed"),
        }
    }
}
