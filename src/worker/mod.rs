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

mod execute;
mod finisher;
mod ledger;
mod pacing;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use std::time::Instant;

use sqlx::MySqlPool;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::db::claim;
use crate::db::dedicated::Dedicated;
use crate::db::enqueue::validate_name;
use crate::db::registry::{Bounds, Role};
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::handler::Handlers;
use crate::retry::RetryPolicy;

use crate::service::{Backoff, Register, STOP_PATIENCE, sleep_or_stop, unless_stopped};

/// When a worker stops on its own. The library's default is [`Mode::Forever`], what a worker embedded
/// in a service wants; `jobq worker` defaults to [`Mode::Drain`] (`--forever` to poll), for cron.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Return once nothing due is left (cron mode).
    Drain,
    /// Poll until shut down.
    #[default]
    Forever,
}

/// Worker settings. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Queues to claim from, in order: a claim fills up from the first queue before it looks at the next.
    pub queues: Vec<String>,
    /// Jobs run at once.
    pub concurrency: u32,
    /// Most rows taken by one claim (never more than the free slots).
    pub batch_size: u32,
    /// Drain or forever.
    pub mode: Mode,
    /// Longest wait between polls when idle.
    pub poll_interval: Duration,
    /// Time running jobs get to finish after shutdown is requested.
    pub shutdown_grace: Duration,
    /// Run-time limit for jobs that set none and whose handler sets none.
    pub default_timeout: Duration,
    /// Time a handler gets to return after it is told to stop (timeout or hard shutdown) before its
    /// task is dropped.
    pub cancel_grace: Duration,
    /// How often the worker refreshes its registry row.
    pub heartbeat_interval: Duration,
    /// The self-fence bound: a worker that cannot write its heartbeat for this long stops its running
    /// jobs, and reapers wait this long plus [`crate::fence::MARGIN`] before they reset its rows on a
    /// lost session (see [`crate::fence`]). At least three heartbeat intervals.
    pub fence_after: Duration,
    /// Retry backoff.
    pub retry: RetryPolicy,
}

impl WorkerConfig {
    /// Default `concurrency`: 10.
    pub const DEFAULT_CONCURRENCY: u32 = 10;
    /// Default `batch_size`: 10.
    pub const DEFAULT_BATCH_SIZE: u32 = 10;
    /// Default `poll_interval`: 2 s. An idle worker sends one statement per interval, a server-side wait
    /// that probes for due jobs every 100 ms, so an INSERT into an idle queue still starts within about
    /// 100 ms (within the interval only where that wait cannot be used).
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(2);
    /// The first idle wait; it doubles up to `poll_interval`.
    pub const DEFAULT_MIN_POLL: Duration = Duration::from_millis(20);
    /// Default `shutdown_grace`: 30 s.
    pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
    /// Default `default_timeout`: 30 min.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
    /// Default `cancel_grace`: 10 s (a command gets SIGTERM, then SIGKILL after 5 s).
    pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(10);
    /// Default `heartbeat_interval`: 2 s, so that five beats fit in the default fence bound and a
    /// worker whose session dropped has re-registered long before it would have to stop its jobs.
    pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(2);
    /// Default `fence_after`: [`crate::fence::DEFAULT_BOUND`] (10 s).
    pub const DEFAULT_FENCE_AFTER: Duration = crate::fence::DEFAULT_BOUND;

    /// The connections a worker's pool needs: one per job, since SQL handlers hold a pooled connection
    /// while they run, and two for the heartbeat's helpers, the cancel watcher and failure finishes.
    /// The claim loop and the finisher hold connections of their own, outside the pool.
    pub fn pool_size(&self) -> u32 {
        self.concurrency + 2
    }

    fn validate(&self) -> Result<()> {
        if self.queues.is_empty() {
            return Err(Error::InvalidArgument(
                "worker needs at least one queue".into(),
            ));
        }
        for q in &self.queues {
            validate_name("queue", q, 64)?;
        }
        if self.concurrency == 0 || self.batch_size == 0 {
            return Err(Error::InvalidArgument(
                "worker concurrency and batch size must be at least 1".into(),
            ));
        }
        if self.concurrency > crate::config::MAX_CONCURRENCY {
            return Err(Error::InvalidArgument(format!(
                "worker concurrency {} is above the maximum of {} jobs per worker process; run more \
                 worker processes instead",
                self.concurrency,
                crate::config::MAX_CONCURRENCY
            )));
        }
        if self.poll_interval.is_zero() || self.heartbeat_interval.is_zero() {
            return Err(Error::InvalidArgument(
                "worker poll and heartbeat intervals must be above zero".into(),
            ));
        }
        if self.fence_after < self.heartbeat_interval * 3 {
            return Err(Error::InvalidArgument(format!(
                "worker fence_after ({}) must be at least three heartbeat intervals ({}): a single \
                 slow heartbeat would otherwise stop every running job",
                humantime::format_duration(self.fence_after),
                humantime::format_duration(self.heartbeat_interval * 3)
            )));
        }
        Ok(())
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            queues: vec!["default".into()],
            concurrency: Self::DEFAULT_CONCURRENCY,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            mode: Mode::default(),
            poll_interval: Self::DEFAULT_POLL_INTERVAL,
            shutdown_grace: Self::DEFAULT_SHUTDOWN_GRACE,
            default_timeout: Self::DEFAULT_TIMEOUT,
            cancel_grace: Self::DEFAULT_CANCEL_GRACE,
            heartbeat_interval: Self::DEFAULT_HEARTBEAT,
            fence_after: Self::DEFAULT_FENCE_AFTER,
            retry: RetryPolicy::default(),
        }
    }
}

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
    /// Jobs whose row was taken away from this worker: stopped as soon as that was seen, or refused
    /// at the finish.
    pub lost: u64,
    /// Jobs stopped by the self-fence (the worker could not confirm it was alive).
    pub fenced: u64,
    /// Claims that failed after their internal retries (each one logged).
    pub claim_errors: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    claimed: AtomicU64,
    done: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    cancelled: AtomicU64,
    released: AtomicU64,
    lost: AtomicU64,
    fenced: AtomicU64,
    claim_errors: AtomicU64,
}

impl Counters {
    fn report(&self) -> WorkerReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerReport {
            claimed: g(&self.claimed),
            done: g(&self.done),
            retried: g(&self.retried),
            dead: g(&self.dead),
            cancelled: g(&self.cancelled),
            released: g(&self.released),
            lost: g(&self.lost),
            fenced: g(&self.fenced),
            claim_errors: g(&self.claim_errors),
        }
    }
}

/// Claims and runs jobs. See the module docs.
#[derive(Debug)]
pub struct Worker {
    pool: MySqlPool,
    handlers: Arc<Handlers>,
    cfg: WorkerConfig,
}

/// What every job task of one worker shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) pool: MySqlPool,
    pub(crate) handlers: Arc<Handlers>,
    pub(crate) cfg: WorkerConfig,
    pub(crate) token: String,
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
    /// Where an idle wait records the heartbeat it wrote (see [`Session::beat_recorder`]).
    beat_recorder: Arc<AtomicU64>,
    /// False once the server-side wait turned out to be unusable; idle polling then sleeps and probes.
    server_wait: std::sync::atomic::AtomicBool,
}

impl Worker {
    /// A worker running `handlers` on `pool`.
    ///
    /// # Errors
    /// When the settings are out of range or no handler is registered.
    pub fn new(pool: MySqlPool, handlers: Handlers, cfg: WorkerConfig) -> Result<Self> {
        cfg.validate()?;
        if handlers.is_empty() {
            return Err(Error::InvalidArgument(
                "worker has no handlers: register at least one kind (or add [handlers.KIND] to jobq.toml)"
                    .into(),
            ));
        }
        Ok(Self {
            pool,
            handlers: Arc::new(handlers),
            cfg,
        })
    }

    /// Runs until drained ([`Mode::Drain`]) or until `shutdown` is cancelled and running jobs are
    /// finished or handed back.
    ///
    /// # Errors
    /// When the worker cannot register (database unreachable, not migrated), or, in drain mode, when a
    /// claim keeps failing. Errors of single jobs are never returned: they end up in the job's row.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport> {
        // A forever worker waits out a database that is down at start, so a supervisor or service
        // manager does not crash-loop it; a draining one (cron) fails at once and the next tick retries.
        let kinds = self.handlers.kinds();
        let register = Register {
            role: Role::Worker,
            queues: &self.cfg.queues,
            kinds: &kinds,
            bounds: Bounds {
                heartbeat: self.cfg.heartbeat_interval,
                fence: self.cfg.fence_after,
            },
            wait_for_database: self.cfg.mode == Mode::Forever,
            watch_fence: true,
        };
        let Some(registration) = register.open(&self.pool, &shutdown).await? else {
            return Ok(WorkerReport::default());
        };
        let token = registration.token().to_string();
        let beat_recorder = registration.beat_recorder();
        let fence = registration.fence().clone();
        info!(claim = %token, queues = ?self.cfg.queues, kinds = ?self.handlers.kinds(),
              concurrency = self.cfg.concurrency, mode = ?self.cfg.mode,
              fence_after = ?self.cfg.fence_after, "worker started");

        let hard_stop = CancellationToken::new();
        let finisher_stop = CancellationToken::new();
        let ledger = ledger::Ledger::default();
        let (finisher, finisher_task) = finisher::Finisher::start(
            self.pool.clone(),
            token.clone(),
            ledger.in_flight.clone(),
            finisher_stop.clone(),
            hard_stop.clone(),
        );
        let shared = Arc::new(Shared {
            pool: self.pool.clone(),
            handlers: self.handlers.clone(),
            cfg: self.cfg.clone(),
            token,
            counters: Counters::default(),
            job_ended: Notify::new(),
            hard_stop,
            ledger,
            fence,
            claim_gate: tokio::sync::Mutex::new(()),
            finisher,
            beat_recorder,
            server_wait: std::sync::atomic::AtomicBool::new(true),
        });
        let tracker = TaskTracker::new();
        let watch_stop = CancellationToken::new();
        let watcher = tokio::spawn(watch_claims(shared.clone(), watch_stop.clone()));
        let mut claim_conn = Dedicated::new(self.pool.clone());
        let result = fetch_loop(&shared, &mut claim_conn, &tracker, &shutdown).await;
        // Every step of the way out is bounded, and the independent ones run side by side: on a
        // silently dropped network a statement (even the polite COM_QUIT) can hang for many minutes,
        // and a SIGTERM must not wait for that.
        let claim_conn_closed = tokio::spawn(async move {
            let _ = tokio::time::timeout(STOP_PATIENCE, claim_conn.close()).await;
        });

        tracker.close();
        if !tracker.is_empty() {
            info!(running = tracker.len(), grace = ?shared.cfg.shutdown_grace, "waiting for running jobs");
        }
        if tokio::time::timeout(shared.cfg.shutdown_grace, tracker.wait())
            .await
            .is_err()
        {
            warn!(
                running = tracker.len(),
                "shutdown grace is over; stopping running jobs and handing them back"
            );
            shared.hard_stop.cancel();
            tracker.wait().await;
        }
        watch_stop.cancel();
        // Every job task has ended, so nothing is waiting on the finisher.
        finisher_stop.cancel();
        tokio::join!(
            stop_task(watcher),
            stop_task(finisher_task),
            stop_task(claim_conn_closed),
            registration.close(&self.pool),
        );
        let report = shared.counters.report();
        info!(?report, "worker stopped");
        result.map(|()| report)
    }
}

/// Longest wait for more free slots before a claim, when fewer than half a batch is free.
const CLAIM_FILL_WAIT: Duration = Duration::from_millis(2);

/// Once a second while the worker runs jobs: reads which of its rows still carry its token, stops at
/// once every copy whose row was taken away (a reaper reset it; running on would make two copies), and
/// trips the jobs an operator asked to cancel. Also reconciles after a claim whose outcome was
/// uncertain.
async fn watch_claims(shared: Arc<Shared>, stop: CancellationToken) {
    const EVERY: Duration = Duration::from_secs(1);
    loop {
        if sleep_or_stop(EVERY, &stop).await {
            return;
        }
        if shared.ledger.is_uncertain() {
            reconcile(&shared).await;
        }
        // Taken before the read: a job claimed after it is not judged by a read that may predate it.
        let running = shared.ledger.snapshot();
        if running.is_empty() {
            continue;
        }
        match claim::held_rows(&shared.pool, &shared.token).await {
            Ok(held) => {
                for &(id, attempt) in &running {
                    let still_ours = held.iter().any(|h| h.id == id && h.attempt == attempt);
                    if !still_ours && shared.ledger.mark_lost(id, attempt) {
                        warn!(job_id = id, attempt, claim = %shared.token,
                              "claim lost: the row no longer carries this worker's token and attempt; stopping this copy");
                    }
                }
                let wanted: Vec<u64> = held
                    .iter()
                    .filter(|h| h.cancel_requested)
                    .map(|h| h.id)
                    .collect();
                for id in shared.ledger.request_cancel(&wanted) {
                    info!(
                        job_id = id,
                        "cancel requested by an operator; stopping the job"
                    );
                }
            }
            Err(e) => debug!(error = %e, "could not read this worker's claims"),
        }
    }
}

/// Hands back rows stamped with this worker's token that it is not running: left by a claim whose
/// COMMIT went through while its reply was lost. Without this they would stay `running` under the token
/// of a live worker, which no reaper touches.
async fn reconcile(shared: &Shared) {
    let _gate = shared.claim_gate.lock().await;
    let held = match claim::held_rows(&shared.pool, &shared.token).await {
        Ok(h) => h,
        Err(e) => {
            debug!(error = %e, "cannot reconcile claims yet");
            return;
        }
    };
    let unknown: Vec<(u64, u16)> = held
        .into_iter()
        .filter(|h| !shared.ledger.runs(h.id))
        .map(|h| (h.id, h.attempt))
        .collect();
    for (id, attempt) in unknown {
        match crate::db::finish::finish(
            &shared.pool,
            id,
            &shared.token,
            attempt,
            &crate::db::finish::Finish::Release,
        )
        .await
        {
            Ok(true) => warn!(
                job_id = id,
                "handed back a job claimed by a claim whose reply was lost"
            ),
            Ok(false) => {}
            Err(e) => {
                debug!(error = %e, "cannot reconcile claims yet");
                return;
            }
        }
    }
    shared.ledger.clear_uncertain();
}

/// Claims while there is room and work; returns when drained or told to stop.
async fn fetch_loop(
    shared: &Arc<Shared>,
    conn: &mut Dedicated,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<()> {
    let cfg = &shared.cfg;
    let slots = Arc::new(Semaphore::new(cfg.concurrency as usize));
    let kinds = shared.handlers.kinds();
    let mut pacer = pacing::Pacer::new(cfg.mode, WorkerConfig::DEFAULT_MIN_POLL, cfg.poll_interval);

    loop {
        let probe_first = match pacer.before_claim() {
            pacing::Before::WaitForWork { back_off } => {
                match wait_until_due(shared, conn, &kinds, pacer.idle_wait(), back_off, shutdown)
                    .await
                {
                    Some(probe) => {
                        pacer.after_wait(!probe);
                        probe
                    }
                    None => return Ok(()),
                }
            }
            pacing::Before::Claim { probe_first } => probe_first,
        };
        // Register before claiming, always: while the session is being rebuilt, or with less than half
        // the fence bound left, a claim could take jobs that the fence would stop a moment later or that
        // a reaper is entitled to reset.
        if !shared.fence.may_claim() {
            if wait_for_fence(shared, shutdown).await {
                return Ok(());
            }
            continue;
        }
        let first = tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(()),
            p = slots.clone().acquire_owned() => p.expect("semaphore is never closed"),
        };
        let mut permits = vec![first];
        // Fill the claim: one claim per free slot would mean a transaction (and a log flush) per job.
        // When fewer than half the batch is free, wait a moment for running jobs to end and free more.
        let want = cfg.batch_size.min(cfg.concurrency.div_ceil(2)).max(1) as usize;
        let deadline = tokio::time::Instant::now() + CLAIM_FILL_WAIT;
        while permits.len() < cfg.batch_size as usize {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) if permits.len() < want && !pacer.probing() => {
                    match tokio::time::timeout_at(deadline, slots.clone().acquire_owned()).await {
                        Ok(p) => permits.push(p.expect("semaphore is never closed")),
                        Err(_) => break,
                    }
                }
                Err(_) => break,
            }
        }

        let gate = shared.claim_gate.lock().await;
        let ended_before_claim = shared.ledger.ended.load(Ordering::SeqCst);
        // A claim on a connection whose network went silent can hang for many minutes: a shutdown
        // waits for it at most STOP_PATIENCE. A claim abandoned then may have committed unseen; its
        // rows go back through the reaper like those of any claimant that is gone.
        let Some(result) = unless_stopped(
            shutdown,
            claim_some(shared, conn, &kinds, permits.len() as u32, probe_first),
        )
        .await
        else {
            warn!("a claim did not answer while stopping; abandoning it");
            return Ok(());
        };
        let claimed = match &result {
            Ok(jobs) if jobs.is_empty() => pacing::Claimed::Nothing {
                idle: slots.available_permits() + permits.len() == cfg.concurrency as usize,
                ended_meanwhile: shared.ledger.ended.load(Ordering::SeqCst) != ended_before_claim,
            },
            Ok(jobs) => pacing::Claimed::Rows {
                got: jobs.len(),
                asked: permits.len(),
            },
            Err(e) => pacing::Claimed::Failed {
                transient: e.is_transient(),
            },
        };
        match pacer.after_claim(claimed) {
            pacing::After::Run => {
                let jobs = result.expect("rows were claimed");
                shared
                    .counters
                    .claimed
                    .fetch_add(jobs.len() as u64, Ordering::Relaxed);
                for (job, permit) in jobs.into_iter().zip(permits) {
                    let (entry, older) = shared.ledger.enter(job.id, job.attempt());
                    tracker.spawn(execute::run_job(shared.clone(), job, permit, entry, older));
                }
                drop(gate);
            }
            pacing::After::Next => {}
            pacing::After::Drained => {
                debug!("nothing due; drained");
                return Ok(());
            }
            pacing::After::WaitForJobEnd => {
                drop((gate, permits));
                // Jobs are still running: they may enqueue more, so look again when one ends.
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => return Ok(()),
                    () = shared.job_ended.notified() => {}
                }
            }
            pacing::After::RetryIn(wait) => {
                drop((gate, permits));
                shared.counters.claim_errors.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = &result {
                    warn!(error = %e, retry_in = ?wait, "claim failed");
                }
                if sleep_or_stop(wait, shutdown).await {
                    return Ok(());
                }
            }
            pacing::After::GiveUp => return result.map(|_| ()),
        }
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

/// Waits until the fence allows claims again; true on shutdown.
async fn wait_for_fence(shared: &Shared, shutdown: &CancellationToken) -> bool {
    info!(since_confirmed = ?shared.fence.since_confirmed(),
          "not claiming until this worker is registered on a live session again");
    while !shared.fence.may_claim() {
        if sleep_or_stop(Duration::from_millis(50), shutdown).await {
            return true;
        }
    }
    info!("registered on a live session; claiming again");
    false
}

/// Idle waits until work is due (`Some(false)`: claim at once), until the server-side wait turns out to
/// be unusable (`Some(true)`: probe before claiming), or until shutdown (`None`). Each wait is twice as
/// long as the last, up to the poll interval; with `back_off`, the first is a plain sleep.
async fn wait_until_due(
    shared: &Shared,
    conn: &mut Dedicated,
    kinds: &[String],
    idle_wait: &mut Backoff,
    back_off: bool,
    shutdown: &CancellationToken,
) -> Option<bool> {
    if back_off && sleep_or_stop(idle_wait.next_delay(), shutdown).await {
        return None;
    }
    loop {
        let outcome =
            idle_wait_for_work(shared, conn, kinds, idle_wait.next_delay(), shutdown).await;
        match outcome {
            IdleWait::Stop => return None,
            // Work is due: claim at once, without a probe first.
            IdleWait::Due => return Some(false),
            // The server-side wait already looked: wait again rather than probe again.
            IdleWait::Nothing if shared.server_wait.load(Ordering::Relaxed) => {}
            IdleWait::Nothing => return Some(true),
        }
    }
}

enum IdleWait {
    Stop,
    Due,
    Nothing,
}

/// Waits up to `wait` for work while idle. With the server-side wait (schema 6) that is one statement,
/// which also writes the heartbeat and returns as soon as a job is due; without it, a sleep followed by
/// the next claim's probe.
async fn idle_wait_for_work(
    shared: &Shared,
    conn: &mut Dedicated,
    kinds: &[String],
    wait: Duration,
    shutdown: &CancellationToken,
) -> IdleWait {
    if shared.server_wait.load(Ordering::Relaxed) {
        // The wait writes the heartbeat only when the last one it wrote is half an interval old: a busy
        // worker that waits every few milliseconds would otherwise commit a registry write each time,
        // on the path between a job's INSERT and its start.
        let last_beat = shared.beat_recorder.load(Ordering::Relaxed);
        let beat_due = crate::session::now_millis().saturating_sub(last_beat)
            >= shared.cfg.heartbeat_interval.as_millis() as u64 / 2;
        let token = beat_due.then_some(shared.token.as_str());
        let sent = Instant::now();
        let call = claim::wait_for_work(conn, token, &shared.cfg.queues, kinds, wait);
        let result = tokio::select! {
            biased;
            () = shutdown.cancelled() => return IdleWait::Stop,
            r = call => r,
        };
        match result {
            Ok(due) => {
                // The wait cannot tell whether the registry row is there; its heartbeat confirms the
                // fence only while the anchor session says it is.
                if beat_due && shared.fence.is_healthy() {
                    shared.fence.confirm(sent);
                    shared
                        .beat_recorder
                        .store(crate::session::now_millis(), Ordering::Relaxed);
                }
                return if due {
                    IdleWait::Due
                } else {
                    IdleWait::Nothing
                };
            }
            Err(e) if e.is_transient() => {
                debug!(error = %e, "idle wait failed; sleeping instead");
            }
            Err(e) => {
                warn!(error = %e, "the server-side idle wait is unusable; polling instead");
                shared.server_wait.store(false, Ordering::Relaxed);
            }
        }
    }
    if sleep_or_stop(wait, shutdown).await {
        IdleWait::Stop
    } else {
        IdleWait::Nothing
    }
}

/// One claim across the worker's queues, in order. While idle it first sends the cheap probe and claims
/// only if the probe saw something due.
async fn claim_some(
    shared: &Shared,
    conn: &mut Dedicated,
    kinds: &[String],
    limit: u32,
    probing: bool,
) -> Result<Vec<claim::ClaimedJob>> {
    if probing && !claim::any_due(conn, &shared.cfg.queues, kinds).await? {
        return Ok(Vec::new());
    }
    let mut jobs = Vec::new();
    for queue in &shared.cfg.queues {
        let want = limit - jobs.len() as u32;
        if want == 0 {
            break;
        }
        jobs.extend(
            claim::claim_batch_watched(
                conn,
                &shared.token,
                queue,
                kinds,
                want,
                shared.ledger.uncertain_flag(),
            )
            .await?,
        );
    }
    Ok(jobs)
}

/// Runs `op` until it succeeds or fails for good, waiting out transient failures (a database outage)
/// with a backoff up to 5 s. Used to record outcomes: a live worker that gave up would leave its own rows
/// `running` under the token of a live process, which no reaper may touch. Only a hard stop ends the
/// patience (the worker is exiting; its claims are then recovered like any dead claimant's).
pub(crate) async fn patiently<T, F, Fut>(
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
pub(crate) struct Patience<'a> {
    hard_stop: &'a CancellationToken,
    backoff: Backoff,
}

impl<'a> Patience<'a> {
    pub(crate) fn new(hard_stop: &'a CancellationToken) -> Self {
        Self {
            hard_stop,
            backoff: Backoff::RETRY,
        }
    }

    /// After a failure to record `what`: true, after a pause, when it is worth trying again.
    pub(crate) async fn wait_after(&mut self, e: &Error, what: &str) -> bool {
        if !e.is_transient() || self.hard_stop.is_cancelled() {
            return false;
        }
        let wait = self.backoff.next_delay();
        warn!(error = %e, retry_in = ?wait, "cannot record {what} yet; retrying");
        sleep_or_stop(wait, self.hard_stop).await;
        true
    }
}
