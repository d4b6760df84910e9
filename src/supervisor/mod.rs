//! The supervisor: keeps N worker processes alive on this host.
//!
//! It starts its child command N times (`jobq worker --forever`, from the same binary, so parent and
//! children are always the same build), restarts any child that exits, with a backoff when one keeps dying young, and releases a dead
//! child's claims at once: the rows whose claim token names this host and the child's pid are reset right
//! away instead of waiting for a reaper to notice.
//!
//! On shutdown it sends SIGTERM to every child, waits for them to drain (up to `shutdown_grace`), then
//! SIGKILLs what is left and releases its claims. On reload (SIGHUP in the binary) it rolls the workers:
//! one child at a time is asked to drain and is replaced by a fresh one, which reads the config anew.
//!
//! Children are started with `JOBQ_SUPERVISOR_PID` set; a worker that sees it asks the kernel for a
//! signal when its parent dies and then drains, so children never outlive a killed supervisor by more
//! than their running jobs.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sqlx::MySqlPool;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::claimant::token::ProcessIdentity;
use crate::db::registry::Role;
use crate::db::{reap, scale};
use crate::error::{Error, Result};
use crate::service::Register;
use crate::worker::WorkerConfig;

mod children;
mod keep_alive;

use children::{Children, Exit, SWEEP_AFTER, Slot, Sweep, describe, is_alive, signal};
pub use keep_alive::keep_alive;

/// How often a supervisor reads the worker count `jobq scale` stores.
const SCALE_EVERY: Duration = Duration::from_secs(2);

/// The environment variable naming a worker's supervisor.
pub const SUPERVISOR_PID_ENV: &str = "JOBQ_SUPERVISOR_PID";

/// The environment variable holding a worker's slot (0 to N-1): stable across restarts, so a child's
/// figures can be labelled by it (`jobq supervise --metrics-addr`) without a new series per pid.
pub const SUPERVISOR_SLOT_ENV: &str = "JOBQ_SUPERVISOR_SLOT";

/// Supervisor settings.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// How many workers to keep alive.
    pub workers: u32,
    /// The program to run (the `jobq` binary).
    pub program: PathBuf,
    /// Its arguments: a worker that polls until it gets SIGTERM (`worker --forever …` for `jobq`).
    pub args: Vec<String>,
    /// Extra environment for the children (the database URL the supervisor uses, so both agree).
    pub env: Vec<(String, String)>,
    /// How long children get to drain after SIGTERM before they are killed.
    pub shutdown_grace: Duration,
    /// First restart delay for a child that died young; it doubles up to `max_backoff`.
    pub min_backoff: Duration,
    /// Longest restart delay.
    pub max_backoff: Duration,
    /// A child that lived this long is healthy: its next restart is immediate.
    pub stable_after: Duration,
}

impl SupervisorConfig {
    /// Default number of worker processes (`jobq supervise -n`): two, so a node keeps claiming while
    /// one child restarts or rolls.
    pub const DEFAULT_WORKERS: u32 = 2;
    /// What a child needs beyond its own shutdown grace to release its rows and exit: 5 s.
    pub const EXIT_MARGIN: Duration = Duration::from_secs(5);
    /// Default `shutdown_grace`: the worker's default 30 s plus [`Self::EXIT_MARGIN`].
    pub const DEFAULT_SHUTDOWN_GRACE: Duration =
        Self::shutdown_grace_for(WorkerConfig::DEFAULT_SHUTDOWN_GRACE);
    /// Default `min_backoff`: 1 s before restarting a child that died young.
    pub const DEFAULT_MIN_BACKOFF: Duration = Duration::from_secs(1);
    /// Default `max_backoff`: 30 s, the longest wait before restarting a child that keeps dying.
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(30);
    /// Default `stable_after`: 10 s; a child that lived longer is restarted at once when it dies.
    pub const DEFAULT_STABLE_AFTER: Duration = Duration::from_secs(10);

    /// The `shutdown_grace` for children whose own shutdown grace is `worker_grace`: that plus
    /// [`Self::EXIT_MARGIN`], so the supervisor never SIGKILLs a child that is still draining.
    pub const fn shutdown_grace_for(worker_grace: Duration) -> Duration {
        worker_grace.saturating_add(Self::EXIT_MARGIN)
    }

    /// `workers` children of `program`, with the default timings.
    pub fn new(workers: u32, program: PathBuf) -> Self {
        Self {
            workers,
            program,
            args: Vec::new(),
            env: Vec::new(),
            shutdown_grace: Self::DEFAULT_SHUTDOWN_GRACE,
            min_backoff: Self::DEFAULT_MIN_BACKOFF,
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
            stable_after: Self::DEFAULT_STABLE_AFTER,
        }
    }
}

/// What a supervisor did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SupervisorReport {
    /// Children started (first starts and restarts).
    pub started: u64,
    /// Children that exited while the supervisor was running (not at its shutdown).
    pub died: u64,
    /// Rows released because their child died.
    pub released: u64,
}

impl std::fmt::Display for SupervisorReport {
    /// The counters that are not zero, as `name=value` (for logs).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::counts::write(
            f,
            &[
                ("started", self.started),
                ("died", self.died),
                ("released", self.released),
            ],
        )
    }
}

/// Keeps worker processes alive. See the module docs.
#[derive(Debug)]
pub struct Supervisor {
    pool: MySqlPool,
    cfg: SupervisorConfig,
}

impl Supervisor {
    /// A supervisor whose children run against the database of `pool`.
    pub fn new(pool: MySqlPool, cfg: SupervisorConfig) -> Result<Self> {
        if cfg.workers == 0 {
            return Err(Error::invalid(
                "supervisor workers",
                "supervise needs at least one worker (-n)",
            ));
        }
        Ok(Self { pool, cfg })
    }

    /// Runs until `shutdown` is cancelled, then drains and stops the children. Each message on `reload`
    /// rolls the workers.
    pub async fn run(
        self,
        shutdown: CancellationToken,
        mut reload: mpsc::Receiver<()>,
    ) -> Result<SupervisorReport> {
        let register = Register::service(Role::Supervisor);
        let Some(registration) = register.open(&self.pool, &shutdown).await? else {
            return Ok(SupervisorReport::default());
        };
        let (exit_tx, mut exits) = mpsc::unbounded_channel::<Exit>();
        let mut kids = Children {
            slots: (0..self.cfg.workers)
                .map(|_| Slot::starting_now(self.cfg.min_backoff, self.cfg.max_backoff))
                .collect(),
            rolling: VecDeque::new(),
            rolling_now: None,
            sweeps: Vec::new(),
            report: SupervisorReport::default(),
        };
        info!(workers = self.cfg.workers, "supervisor started");
        let mut scale_check = tokio::time::interval(SCALE_EVERY);
        scale_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        loop {
            self.start_due(&mut kids, &exit_tx);
            kids.roll_next();
            let due = kids.due_sweeps(Instant::now());
            self.sweep(&mut kids, due).await;
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(()) = reload.recv() => {
                    info!("reload: rolling all workers");
                    kids.roll_all();
                }
                Some(exit) = exits.recv() => self.on_exit(&mut kids, exit).await,
                _ = scale_check.tick() => self.follow_scale(&mut kids).await,
                () = tokio::time::sleep(kids.until_next_wake()) => {}
            }
        }

        self.stop_children(&mut kids, &mut exits).await;
        // The last sweeps wait out their delay (at most SWEEP_AFTER): nothing else would do them.
        if let Some(last) = kids.sweeps.iter().map(|s| s.at).max() {
            tokio::time::sleep(last.saturating_duration_since(Instant::now())).await;
        }
        let due = kids.due_sweeps(Instant::now() + SWEEP_AFTER);
        self.sweep(&mut kids, due).await;
        registration.close(&self.pool).await;
        let report = kids.report;
        info!("supervisor stopped: {report}");
        Ok(report)
    }

    /// Resizes to the worker count `jobq scale` stored for this host (or every host), or back to the
    /// configured count when none is stored. A failed read keeps the current count.
    async fn follow_scale(&self, kids: &mut Children) {
        let host = &ProcessIdentity::current().host;
        let want = match scale::wanted(&self.pool, host).await {
            Ok(w) => w.unwrap_or(self.cfg.workers),
            Err(e) => {
                debug!(error = %e, "could not read the stored worker count; keeping the current one");
                return;
            }
        };
        let want = want.min(crate::admin::scale::Scale::MAX_WORKERS);
        if want != kids.kept() {
            info!(
                from = kids.kept(),
                to = want,
                "scaling workers (jobq scale)"
            );
            kids.resize(want, self.cfg.min_backoff, self.cfg.max_backoff);
        }
    }

    /// Starts the children whose (re)start time has come; one that cannot be started is tried again
    /// after its backoff.
    fn start_due(&self, kids: &mut Children, exit_tx: &mpsc::UnboundedSender<Exit>) {
        for (i, slot) in kids.slots.iter_mut().enumerate() {
            if slot.pid.is_none() && slot.restart_at.is_some_and(|t| t <= Instant::now()) {
                match self.spawn(i, exit_tx) {
                    Ok(pid) => {
                        kids.report.started += 1;
                        slot.pid = Some(pid);
                        slot.started = Instant::now();
                        slot.restart_at = None;
                    }
                    Err(e) => {
                        error!(error = %e, "cannot start a worker process");
                        slot.restart_at = Some(Instant::now() + slot.backoff.next_delay());
                    }
                }
            }
        }
    }

    /// A child ended: release its rows at once and plan its restart (at once after a roll or a long
    /// life, after a growing backoff when it died young, so a broken worker does not spin).
    async fn on_exit(&self, kids: &mut Children, (i, pid, status): Exit) {
        let slot = &mut kids.slots[i];
        if slot.pid != Some(pid) {
            return;
        }
        slot.pid = None;
        if slot.retiring {
            info!(pid, "retired worker exited");
            if kids.rolling_now == Some(i) {
                kids.rolling_now = None;
            }
            self.release_dead(kids, pid, describe(&status)).await;
            kids.trim();
            return;
        }
        let rolled = kids.rolling_now == Some(i);
        if rolled {
            kids.rolling_now = None;
        } else {
            kids.report.died += 1;
        }
        let lived = slot.started.elapsed();
        match &status {
            Ok(s) if rolled => info!(pid, status = %s, "rolled worker exited"),
            Ok(s) => warn!(pid, status = %s, lived = ?lived, "worker exited; restarting it"),
            Err(e) => warn!(pid, error = %e, "lost track of a worker; restarting it"),
        }
        self.release_dead(kids, pid, describe(&status)).await;
        let slot = &mut kids.slots[i];
        if rolled || lived >= self.cfg.stable_after {
            slot.backoff.reset();
            slot.restart_at = Some(Instant::now());
        } else {
            let wait = slot.backoff.next_delay();
            warn!(pid, retry_in = ?wait, "worker died young; backing off");
            slot.restart_at = Some(Instant::now() + wait);
        }
    }

    /// Releases dead child `pid` now, and plans a second release [`SWEEP_AFTER`] from now.
    async fn release_dead(&self, kids: &mut Children, pid: u32, why: String) {
        kids.report.released += self.release(pid, &why).await;
        kids.sweeps.push(Sweep {
            pid,
            at: Instant::now() + SWEEP_AFTER,
            why,
        });
    }

    /// Releases the dead children of `due` again. A pid that is alive again belongs to another process
    /// by now (the kernel reused it) and is left alone: its rows are not ours to release.
    async fn sweep(&self, kids: &mut Children, due: Vec<Sweep>) {
        for Sweep { pid, why, .. } in due {
            let ours = kids.slots.iter().any(|s| s.pid == Some(pid));
            if ours || is_alive(pid) {
                continue;
            }
            let n = self.release(pid, &why).await;
            if n > 0 {
                warn!(
                    pid,
                    rows = n,
                    "released rows a dead worker claimed as it died"
                );
            }
            kids.report.released += n;
        }
    }

    fn spawn(&self, slot: usize, exits: &mpsc::UnboundedSender<Exit>) -> Result<u32> {
        let mut cmd = Command::new(&self.cfg.program);
        cmd.args(&self.cfg.args)
            .envs(self.cfg.env.iter().map(|(k, v)| (k, v)))
            .env(SUPERVISOR_PID_ENV, std::process::id().to_string())
            .env(SUPERVISOR_SLOT_ENV, slot.to_string())
            .stdin(std::process::Stdio::null());
        let mut child = cmd.spawn().map_err(|e| Error::Io {
            context: format!("starting {}", self.cfg.program.display()),
            source: e,
        })?;
        let pid = child.id().unwrap_or(0);
        let tx = exits.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = tx.send((slot, pid, status));
        });
        info!(pid, slot, "started worker");
        Ok(pid)
    }

    /// Resets the running rows of child `pid` (and forgets its registry row). Returns the rows reset.
    async fn release(&self, pid: u32, why: &str) -> u64 {
        let me = ProcessIdentity::current();
        let claims = match reap::claims_of_process(&self.pool, &me.host, &me.host_id, pid).await {
            Ok(c) => c,
            Err(e) => {
                warn!(pid, error = %e, "could not look up the dead worker's claims; the reaper will release them");
                return 0;
            }
        };
        let mut n = 0;
        if let Err(e) = reap::forget_process(&self.pool, &me.host_id, pid).await {
            warn!(pid, error = %e, "could not remove the dead worker's registry row; the reaper will");
        }
        for claim in claims {
            match crate::reaper::release_claimant(
                &self.pool,
                &claim,
                why,
                "supervisor",
                "worker_exited",
                reap::ResetIf::ProcessDead,
            )
            .await
            {
                Ok(jobs) => n += jobs.map_or(0, |j| j.len() as u64),
                Err(e) => warn!(pid, error = %e, "could not release claims; the reaper will"),
            }
        }
        n
    }

    /// SIGTERMs every child, waits `shutdown_grace` for them to exit, SIGKILLs the rest, and releases
    /// what each held. A child that exited cleanly released its own rows; forgetting its registry row
    /// anyway covers one whose goodbye did not reach the database in time.
    async fn stop_children(&self, kids: &mut Children, exits: &mut mpsc::UnboundedReceiver<Exit>) {
        let live: Vec<u32> = kids.slots.iter().filter_map(|s| s.pid).collect();
        info!(workers = live.len(), grace = ?self.cfg.shutdown_grace, "stopping workers");
        for pid in &live {
            signal(*pid, Signal::SIGTERM);
        }
        let deadline = tokio::time::Instant::now() + self.cfg.shutdown_grace;
        let mut killed = false;
        while kids.slots.iter().any(|s| s.pid.is_some()) {
            let exit = if killed {
                exits.recv().await
            } else {
                match tokio::time::timeout_at(deadline, exits.recv()).await {
                    Ok(exit) => exit,
                    Err(_) => {
                        for pid in kids.slots.iter().filter_map(|s| s.pid) {
                            warn!(
                                pid,
                                "worker did not stop within the grace period; killing it"
                            );
                            signal(pid, Signal::SIGKILL);
                        }
                        killed = true;
                        continue;
                    }
                }
            };
            let Some((i, pid, status)) = exit else { break };
            if kids.slots[i].pid != Some(pid) {
                continue;
            }
            kids.slots[i].pid = None;
            if matches!(&status, Ok(s) if s.success()) {
                if let Err(e) =
                    reap::forget_process(&self.pool, &ProcessIdentity::current().host_id, pid).await
                {
                    warn!(pid, error = %e, "could not remove a stopped worker's registry row; the reaper will");
                }
            } else {
                self.release_dead(kids, pid, describe(&status)).await;
            }
        }
    }
}
