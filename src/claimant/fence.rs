//! Self-fencing: a process that cannot confirm to the database that it is alive stops its jobs before
//! any reaper may hand them to someone else.
//!
//! The reaper cannot tell a dead worker from a live one it has lost touch with (a dropped session, a
//! network cut, a proxy restart): both stop confirming. If it handed the rows on while the live one kept
//! running them, a job would run twice at the same time. So the two sides keep one rule, each on a clock
//! it can trust:
//!
//! * **The worker** records a *confirmation* each time a statement of its own wrote `heartbeat_at =
//!   NOW(6)` to its registry row, stamped with the local monotonic instant taken *before* the statement
//!   was sent. The server evaluated `NOW(6)` later than that instant, so `confirmed + bound` (local) is
//!   never later, in real time, than `heartbeat_at + bound` (database). Once `bound` has passed since the
//!   last confirmation, the worker trips its fence: running jobs are told to stop and, [`KILL_GRACE`]
//!   later, forced (a command's process group gets SIGKILL; a library handler's task is dropped). It
//!   claims nothing until it has confirmed again.
//! * **The reaper** resets a claimant judged only by a lost session or an old heartbeat no earlier than
//!   `heartbeat_at + bound + MARGIN` by the database clock (see [`crate::claimant::liveness`]). [`MARGIN`] is
//!   larger than [`KILL_GRACE`] plus the watchdog's tick, so by then the claimant's copies are gone.
//!
//! Each process stores its bound in its registry row, so reapers judge every claimant by the bound it
//! keeps itself. Process death seen on the same host (pid gone or reused) needs no fence: nothing of a
//! dead process runs on (command handlers die with their worker).
//!
//! The watchdog is an OS thread rather than a task, so a runtime whose threads are all busy still
//! trips the fence on time; it only flips a cancellation token and, as a last resort, SIGKILLs the
//! command groups this process runs.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// Default bound: 10 s, five default heartbeats. A worker rides out a database outage or network cut
/// shorter than this without stopping its jobs.
pub(crate) const DEFAULT_BOUND: Duration = Duration::from_secs(10);

/// Time a job gets between being told to stop by the fence and being forced.
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub const KILL_GRACE: Duration = Duration::from_secs(1);

/// What a reaper adds to a claimant's bound before it may reset the claimant's rows: the kill grace,
/// the watchdog's tick and a second of slack for scheduling and clock rate.
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))] // public through `testing`
pub const MARGIN: Duration = Duration::from_secs(2);

/// How often the watchdog looks.
const TICK: Duration = Duration::from_millis(100);

const _: () = assert!(MARGIN.as_millis() >= KILL_GRACE.as_millis() + 2 * TICK.as_millis());

/// A process's fence. Cheap to clone; all clones share one state.
#[derive(Debug, Clone)]
pub(crate) struct Fence {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    origin: Instant,
    bound: Duration,
    /// Milliseconds after `origin` of the send instant of the last confirmation.
    confirmed_ms: AtomicU64,
    /// False while the session is being rebuilt or the registry row is missing: no claims then.
    healthy: AtomicBool,
    /// Tripped when the bound passes; replaced by a fresh token on the next confirmation.
    token: Mutex<CancellationToken>,
    /// Jobs running under this fence, for the last-resort kill.
    running: AtomicUsize,
}

impl Fence {
    /// A fence with `bound`, confirmed as of now (the caller has just registered).
    pub(crate) fn new(bound: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                origin: Instant::now(),
                bound,
                confirmed_ms: AtomicU64::new(0),
                healthy: AtomicBool::new(true),
                token: Mutex::new(CancellationToken::new()),
                running: AtomicUsize::new(0),
            }),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.inner.origin).as_millis() as u64
    }

    /// Records that a statement sent at `sent` wrote this process's heartbeat. Re-arms a tripped fence.
    pub(crate) fn confirm(&self, sent: Instant) {
        self.inner
            .confirmed_ms
            .fetch_max(self.ms(sent), Ordering::SeqCst);
        let mut token = self.lock_token();
        if token.is_cancelled() && !self.overdue() {
            info!("liveness confirmed again; claiming resumes");
            *token = CancellationToken::new();
        }
    }

    /// Marks the session as being rebuilt (false) or whole and registered again (true).
    pub(crate) fn set_healthy(&self, healthy: bool) {
        self.inner.healthy.store(healthy, Ordering::SeqCst);
    }

    /// Whether the session is whole and registered: a confirmation written by another connection (the
    /// idle wait) counts only then, since it cannot tell whether the registry row is there.
    pub(crate) fn is_healthy(&self) -> bool {
        self.inner.healthy.load(Ordering::SeqCst)
    }

    /// Time since the last confirmation.
    pub(crate) fn since_confirmed(&self) -> Duration {
        let now = self.ms(Instant::now());
        Duration::from_millis(now.saturating_sub(self.inner.confirmed_ms.load(Ordering::SeqCst)))
    }

    /// Whether the session is whole and confirmed within the bound: the registry row is live.
    pub(crate) fn is_confirmed(&self) -> bool {
        self.is_healthy() && !self.overdue()
    }

    fn overdue(&self) -> bool {
        self.since_confirmed() >= self.inner.bound
    }

    /// Whether a claim may be made now: the session is whole and at least half the bound is left, so
    /// a job is not claimed only to be fenced a moment later.
    pub(crate) fn may_claim(&self) -> bool {
        self.is_healthy()
            && self.since_confirmed() < self.inner.bound / 2
            && !self.lock_token().is_cancelled()
    }

    /// The token the fence trips; jobs started now watch this one.
    pub(crate) fn token(&self) -> CancellationToken {
        self.lock_token().clone()
    }

    fn lock_token(&self) -> std::sync::MutexGuard<'_, CancellationToken> {
        crate::sync::lock(&self.inner.token)
    }

    /// Counts a job as running under this fence until the guard is dropped.
    pub(crate) fn enter(&self) -> RunningGuard {
        self.inner.running.fetch_add(1, Ordering::SeqCst);
        RunningGuard {
            fence: self.clone(),
        }
    }

    /// Starts the watchdog thread; it stops when `stop` is cancelled (join the handle after that).
    /// `last_resort` runs on that thread when fenced jobs have not stopped by their grace: it must stop
    /// what they started (the worker passes the kill of its handlers' processes) without the async
    /// runtime, which may be what is stuck. Passed in, so that the fence knows nothing of handlers.
    pub(crate) fn watch(
        &self,
        stop: CancellationToken,
        last_resort: fn(),
    ) -> std::thread::JoinHandle<()> {
        let fence = self.clone();
        std::thread::Builder::new()
            .name("jobq-fence".into())
            .spawn(move || fence.watchdog(&stop, last_resort))
            .expect("spawning the fence watchdog thread")
    }

    fn watchdog(&self, stop: &CancellationToken, last_resort: fn()) {
        let mut tripped_at: Option<Instant> = None;
        let mut forced = false;
        while !stop.is_cancelled() {
            std::thread::sleep(TICK);
            if !self.overdue() {
                tripped_at = None;
                forced = false;
                continue;
            }
            let token = self.token();
            if !token.is_cancelled() {
                warn!(
                    since_confirmed = ?self.since_confirmed(),
                    bound = ?self.inner.bound,
                    running = self.inner.running.load(Ordering::SeqCst),
                    "cannot confirm liveness to the database: stopping running jobs before a reaper may hand them on"
                );
                token.cancel();
                tripped_at = Some(Instant::now());
            }
            // The job tasks force their handlers after KILL_GRACE. Should they not get to run (every
            // runtime thread blocked), kill the commands from here.
            if !forced
                && tripped_at.is_some_and(|t| t.elapsed() >= KILL_GRACE + 2 * TICK)
                && self.inner.running.load(Ordering::SeqCst) > 0
            {
                error!("fenced jobs did not stop in time; killing what their handlers started");
                last_resort();
                forced = true;
            }
        }
    }
}

/// See [`Fence::enter`].
#[derive(Debug)]
pub(crate) struct RunningGuard {
    fence: Fence,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.fence.inner.running.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static LAST_RESORT: AtomicBool = AtomicBool::new(false);

    #[test]
    fn the_last_resort_runs_when_fenced_jobs_do_not_stop() {
        let fence = Fence::new(Duration::from_millis(200));
        let running = fence.enter();
        let stop = CancellationToken::new();
        let dog = fence.watch(stop.clone(), || LAST_RESORT.store(true, Ordering::SeqCst));
        let until =
            Instant::now() + Duration::from_millis(200) + KILL_GRACE + Duration::from_secs(2);
        while !LAST_RESORT.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(TICK);
        }
        assert!(fence.token().is_cancelled());
        assert!(
            LAST_RESORT.load(Ordering::SeqCst),
            "a job still running after the grace gets the last resort"
        );
        drop(running);
        stop.cancel();
        dog.join().unwrap();
    }

    #[test]
    fn trips_after_the_bound_and_rearms_on_confirmation() {
        let fence = Fence::new(Duration::from_millis(300));
        assert!(fence.may_claim());
        let stop = CancellationToken::new();
        let dog = fence.watch(stop.clone(), || {});
        let first = fence.token();
        std::thread::sleep(Duration::from_millis(200));
        assert!(!fence.may_claim(), "less than half the bound is left");
        assert!(!first.is_cancelled());
        std::thread::sleep(Duration::from_millis(300));
        assert!(first.is_cancelled(), "the bound has passed");
        assert!(!fence.may_claim());
        fence.confirm(Instant::now());
        assert!(fence.may_claim());
        assert!(
            !fence.token().is_cancelled(),
            "a fresh token after re-arming"
        );
        assert!(first.is_cancelled());
        stop.cancel();
        dog.join().unwrap();
    }

    #[test]
    fn an_unhealthy_session_claims_nothing() {
        let fence = Fence::new(Duration::from_secs(10));
        fence.set_healthy(false);
        assert!(!fence.may_claim());
        fence.set_healthy(true);
        assert!(fence.may_claim());
    }

    #[test]
    fn a_confirmation_sent_earlier_never_moves_the_deadline_back() {
        let fence = Fence::new(Duration::from_secs(10));
        let early = Instant::now();
        std::thread::sleep(Duration::from_millis(30));
        fence.confirm(Instant::now());
        let after = fence.since_confirmed();
        fence.confirm(early);
        assert!(fence.since_confirmed() <= after + Duration::from_millis(5));
    }
}
