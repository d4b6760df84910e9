//! The worker: claims due jobs, runs them with their handlers, and finishes them under its claim token.
//!
//! Two modes:
//! * [`Mode::Drain`] (the default of `jobq worker`): claim and run until nothing due is left, then return.
//!   A crontab line `* * * * * jobq worker` thus starts as many workers as the backlog keeps busy.
//! * [`Mode::Forever`]: keep polling. After a claim that filled every free slot the next claim follows
//!   at once; after a short or empty one the worker waits, doubling the wait from
//!   [`WorkerConfig::DEFAULT_MIN_POLL`] up to `poll_interval`, and while idle it only sends one
//!   statement per wait (a server-side wait that probes without locking).
//!
//! A worker never holds claimed rows it is not running: each claim takes at most as many rows as it has
//! free slots (`concurrency`), so an idle worker elsewhere is never starved by one that hoards.
//!
//! Shutdown is in two steps: when `shutdown` is cancelled the worker stops claiming and lets running jobs
//! finish for up to `shutdown_grace`; then it tells the rest to stop, and hands their rows back as
//! runnable (the attempt counts). It removes its registry row and returns.

mod config;
mod execute;
mod fetch;
mod finisher;
mod ledger;
mod limits;
mod pacing;
mod patience;
mod report;
#[cfg(feature = "test-util")]
pub(crate) mod signals;
mod slices;
mod trace;
mod watch;

pub use config::{Mode, WorkerConfig};
pub use report::WorkerReport;

use patience::{Patience, patiently};
use report::Counters;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use sqlx::MySqlPool;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::claimant::fence::Fence;
use crate::claimant::token::TokenText;
use crate::db::dedicated::Dedicated;
use crate::db::registry::{Bounds, Role};
use crate::error::{Error, Result};
use crate::handler::Handlers;
use crate::service::{Register, Registration, STOP_PATIENCE};

/// Claims and runs jobs. See the module docs.
#[derive(Debug)]
pub struct Worker {
    pool: MySqlPool,
    handlers: Arc<Handlers>,
    cfg: WorkerConfig,
    #[cfg(feature = "test-util")]
    signals: signals::Signals,
}

/// What every job task of one worker shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) pool: MySqlPool,
    pub(crate) handlers: Arc<Handlers>,
    pub(crate) cfg: WorkerConfig,
    /// The claim token this worker stamps and fences by.
    pub(crate) token: TokenText,
    pub(crate) counters: Counters,
    /// Signalled each time a job task ends, so a draining worker can claim again.
    pub(crate) job_ended: Notify,
    /// Cancelled when the shutdown grace is over: running jobs must stop.
    pub(crate) hard_stop: CancellationToken,
    /// What runs, what is held, what is uncertain.
    pub(crate) ledger: ledger::Ledger,
    /// The self-fence, confirmed by the heartbeat and the idle wait.
    pub(crate) fence: Fence,
    /// Held while a claim is made and its jobs entered in the ledger, so that reconciling never sees a
    /// half-entered claim.
    claim_gate: tokio::sync::Mutex<()>,
    /// Batches the done finishes.
    pub(crate) finisher: finisher::Finisher,
    /// The jobs' figures for the metrics recorder, by queue and kind.
    pub(crate) figures: crate::telemetry::FiguresByJob,
    /// Where an idle wait records the heartbeat it wrote (see [`Session::beat_recorder`]).
    beat_recorder: Arc<AtomicU64>,
    /// False once the server-side wait turned out to be unusable; idle polling then sleeps and probes.
    server_wait: AtomicBool,
    #[cfg(feature = "test-util")]
    pub(crate) signals: signals::Signals,
}

impl Worker {
    /// A worker running `handlers` on `pool`.
    ///
    /// # Errors
    /// When the settings are out of range or no handler is registered.
    pub fn new(pool: MySqlPool, handlers: Handlers, cfg: WorkerConfig) -> Result<Self> {
        cfg.validate()?;
        if handlers.is_empty() {
            return Err(Error::invalid(
                "worker handlers",
                "none registered: register at least one kind (or add [handlers.KIND] to jobq.toml)",
            ));
        }
        Ok(Self {
            pool,
            handlers: Arc::new(handlers),
            cfg,
            #[cfg(feature = "test-util")]
            signals: signals::Signals::default(),
        })
    }

    /// What this worker does, as counts a test can wait on (take it before [`Worker::run`]).
    #[cfg(feature = "test-util")]
    pub fn signals(&self) -> signals::Signals {
        self.signals.clone()
    }

    /// Runs until drained ([`Mode::Drain`]) or until `shutdown` is cancelled and running jobs are
    /// finished or handed back.
    ///
    /// # Errors
    /// When the worker cannot register (database unreachable, not migrated), or, in drain mode, when a
    /// claim keeps failing. Errors of single jobs are never returned: they end up in the job's row.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport> {
        let kinds = self.handlers.kinds();
        let register = Register {
            role: Role::Worker,
            queues: &self.cfg.queues,
            kinds: &kinds,
            bounds: Bounds {
                heartbeat: self.cfg.heartbeat_interval,
                fence: self.cfg.fence_after,
            },
            // A forever worker waits out a database that is down at start, so a supervisor or service
            // manager does not crash-loop it; a draining one (cron) fails at once and the next tick
            // retries.
            wait_for_database: self.cfg.mode == Mode::Forever,
            // The watchdog's last resort kills the processes the handlers started.
            watch_fence: Some(crate::handler::command::kill_all_running),
        };
        let Some(registration) = register.open(&self.pool, &shutdown).await? else {
            return Ok(WorkerReport::default());
        };
        info!(claim = %registration.token(), queues = %self.cfg.queues.join(","), kinds = %kinds.join(","),
              concurrency = self.cfg.concurrency, mode = ?self.cfg.mode,
              fence_after = ?self.cfg.fence_after, "worker started");

        // Handlers that keep programs between jobs start them now, beside the first claim; a draining
        // worker (a cron tick, often with nothing to do) starts them only for a job that needs one.
        if self.cfg.mode == Mode::Forever {
            self.handlers.start_all();
        }
        let running = Running::start(&self, &registration);
        let mut claim_conn = Dedicated::new(self.pool.clone());
        let result =
            fetch::fetch_loop(&running.shared, &mut claim_conn, &running.jobs, &shutdown).await;
        // Every step of the way out is bounded, and the independent ones run side by side: on a
        // silently dropped network a statement (even the polite COM_QUIT) can hang for many minutes,
        // and a SIGTERM must not wait for that.
        let claim_conn_closed = tokio::spawn(async move {
            let _ = tokio::time::timeout(STOP_PATIENCE, claim_conn.close()).await;
        });
        let report = running
            .stop(claim_conn_closed, registration, &self.pool)
            .await;
        crate::counts::Logged::log(&report, "worker stopped", false);
        result.map(|()| report)
    }
}

/// A registered worker's moving parts, from its start to its stop.
struct Running {
    shared: Arc<Shared>,
    /// One task per running job.
    jobs: TaskTracker,
    watcher: JoinHandle<()>,
    watch_stop: CancellationToken,
    finisher_task: JoinHandle<()>,
    finisher_stop: CancellationToken,
}

impl Running {
    /// Starts the finisher and the claim watcher under `registration`'s token.
    fn start(worker: &Worker, registration: &Registration) -> Self {
        let token = TokenText::from(registration.token());
        let hard_stop = CancellationToken::new();
        let finisher_stop = CancellationToken::new();
        let ledger = ledger::Ledger::default();
        let (finisher, finisher_task) = finisher::Finisher::start(
            worker.pool.clone(),
            token.clone(),
            ledger.in_flight.clone(),
            finisher_stop.clone(),
            hard_stop.clone(),
        );
        let shared = Arc::new(Shared {
            pool: worker.pool.clone(),
            handlers: worker.handlers.clone(),
            cfg: worker.cfg.clone(),
            token,
            counters: Counters {
                done: registration.done_counter(),
                ..Counters::default()
            },
            job_ended: Notify::new(),
            hard_stop,
            ledger,
            fence: registration.fence().clone(),
            claim_gate: tokio::sync::Mutex::new(()),
            finisher,
            figures: crate::telemetry::FiguresByJob::default(),
            beat_recorder: registration.beat_recorder(),
            server_wait: AtomicBool::new(true),
            #[cfg(feature = "test-util")]
            signals: worker.signals.clone(),
        });
        let watch_stop = CancellationToken::new();
        let watcher = tokio::spawn(watch::watch_claims(shared.clone(), watch_stop.clone()));
        Self {
            shared,
            jobs: TaskTracker::new(),
            watcher,
            watch_stop,
            finisher_task,
            finisher_stop,
        }
    }

    /// The second step of shutdown: running jobs get `shutdown_grace` to finish, then are told to stop
    /// and handed back; then the helpers stop and the registry row goes.
    async fn stop(
        self,
        claim_conn_closed: JoinHandle<()>,
        registration: Registration,
        pool: &MySqlPool,
    ) -> WorkerReport {
        let (shared, jobs) = (&self.shared, &self.jobs);
        jobs.close();
        if !jobs.is_empty() {
            info!(running = jobs.len(), grace = ?shared.cfg.shutdown_grace, "waiting for running jobs");
        }
        if tokio::time::timeout(shared.cfg.shutdown_grace, jobs.wait())
            .await
            .is_err()
        {
            warn!(
                running = jobs.len(),
                "shutdown grace is over; stopping running jobs and handing them back"
            );
            shared.hard_stop.cancel();
            jobs.wait().await;
        }
        self.watch_stop.cancel();
        // Every job task has ended, so nothing is waiting on the finisher.
        self.finisher_stop.cancel();
        // Handlers that keep programs alive between jobs stop them now that no job runs.
        let handlers = shared.handlers.clone();
        let handlers_stopped = tokio::spawn(async move { handlers.stop_all().await });
        tokio::join!(
            stop_task(handlers_stopped),
            stop_task(self.watcher),
            stop_task(self.finisher_task),
            stop_task(claim_conn_closed),
            registration.close(pool),
        );
        self.shared.counters.report()
    }
}

/// Waits for a task told to stop, for at most [`STOP_PATIENCE`]; then drops it.
async fn stop_task(mut task: tokio::task::JoinHandle<()>) {
    if tokio::time::timeout(STOP_PATIENCE, &mut task)
        .await
        .is_err()
    {
        warn!("a worker task did not stop in time (the database does not answer); abandoning it");
        task.abort();
    }
}
