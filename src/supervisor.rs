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
//! SIGTERM when its parent dies, so children never outlive a killed supervisor.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sqlx::MySqlPool;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::db::reap;
use crate::db::registry::Role;
use crate::error::{Error, Result};
use crate::service::{Backoff, Register};
use crate::token::ProcessIdentity;

/// The environment variable naming a worker's supervisor.
pub const SUPERVISOR_PID_ENV: &str = "JOBQ_SUPERVISOR_PID";

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
    /// Default `shutdown_grace`: the worker's 30 s plus 5 s to release and exit.
    pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(35);

    /// `workers` children of `program`, with the default timings.
    pub fn new(workers: u32, program: PathBuf) -> Self {
        Self {
            workers,
            program,
            args: Vec::new(),
            env: Vec::new(),
            shutdown_grace: Self::DEFAULT_SHUTDOWN_GRACE,
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            stable_after: Duration::from_secs(10),
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

#[derive(Debug)]
struct Slot {
    pid: Option<u32>,
    started: Instant,
    backoff: Backoff,
    restart_at: Option<Instant>,
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
            return Err(Error::InvalidArgument(
                "supervise needs at least one worker (-n)".into(),
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
        let (exit_tx, mut exits) =
            mpsc::unbounded_channel::<(usize, u32, std::io::Result<ExitStatus>)>();
        let mut report = SupervisorReport::default();
        let mut slots: Vec<Slot> = (0..self.cfg.workers)
            .map(|_| Slot {
                pid: None,
                started: Instant::now(),
                backoff: Backoff::new(self.cfg.min_backoff, self.cfg.max_backoff),
                restart_at: Some(Instant::now()),
            })
            .collect();
        let mut rolling: VecDeque<usize> = VecDeque::new();
        let mut rolling_now: Option<usize> = None;
        info!(workers = self.cfg.workers, "supervisor started");

        loop {
            // Start whatever is due.
            for (i, slot) in slots.iter_mut().enumerate() {
                if slot.pid.is_none() && slot.restart_at.is_some_and(|t| t <= Instant::now()) {
                    match self.spawn(i, &exit_tx) {
                        Ok(pid) => {
                            report.started += 1;
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
            if rolling_now.is_none()
                && let Some(i) = rolling.pop_front()
                && let Some(pid) = slots[i].pid
            {
                info!(pid, "rolling worker: asking it to drain");
                signal(pid, Signal::SIGTERM);
                rolling_now = Some(i);
            }
            let next_restart = slots
                .iter()
                .filter_map(|s| s.restart_at)
                .min()
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_secs(3600));

            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(()) = reload.recv() => {
                    info!("reload: rolling all workers");
                    rolling = (0..slots.len()).filter(|i| Some(*i) != rolling_now).collect();
                }
                Some((i, pid, status)) = exits.recv() => {
                    let slot = &mut slots[i];
                    if slot.pid != Some(pid) {
                        continue;
                    }
                    slot.pid = None;
                    let rolled = rolling_now == Some(i);
                    if rolled {
                        rolling_now = None;
                    } else {
                        report.died += 1;
                    }
                    let lived = slot.started.elapsed();
                    match &status {
                        Ok(s) if rolled => info!(pid, status = %s, "rolled worker exited"),
                        Ok(s) => warn!(pid, status = %s, lived = ?lived, "worker exited; restarting it"),
                        Err(e) => warn!(pid, error = %e, "lost track of a worker; restarting it"),
                    }
                    report.released += self.release(pid, &describe(&status)).await;
                    if rolled || lived >= self.cfg.stable_after {
                        slot.backoff.reset();
                        slot.restart_at = Some(Instant::now());
                    } else {
                        let wait = slot.backoff.next_delay();
                        warn!(pid, retry_in = ?wait, "worker died young; backing off");
                        slot.restart_at = Some(Instant::now() + wait);
                    }
                }
                () = tokio::time::sleep(next_restart) => {}
            }
        }

        self.stop_children(&mut slots, &mut exits, &mut report)
            .await;
        registration.close(&self.pool).await;
        info!(?report, "supervisor stopped");
        Ok(report)
    }

    fn spawn(
        &self,
        slot: usize,
        exits: &mpsc::UnboundedSender<(usize, u32, std::io::Result<ExitStatus>)>,
    ) -> Result<u32> {
        let mut cmd = Command::new(&self.cfg.program);
        cmd.args(&self.cfg.args)
            .envs(self.cfg.env.iter().map(|(k, v)| (k, v)))
            .env(SUPERVISOR_PID_ENV, std::process::id().to_string())
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
        let claims = match reap::claims_of_process(&self.pool, &me.host, pid).await {
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
            match crate::reaper::release_claimant(&self.pool, &claim, why, "supervisor").await {
                Ok(jobs) => n += jobs.len() as u64,
                Err(e) => warn!(pid, error = %e, "could not release claims; the reaper will"),
            }
        }
        n
    }

    async fn stop_children(
        &self,
        slots: &mut [Slot],
        exits: &mut mpsc::UnboundedReceiver<(usize, u32, std::io::Result<ExitStatus>)>,
        report: &mut SupervisorReport,
    ) {
        let live: Vec<u32> = slots.iter().filter_map(|s| s.pid).collect();
        info!(workers = live.len(), grace = ?self.cfg.shutdown_grace, "stopping workers");
        for pid in &live {
            signal(*pid, Signal::SIGTERM);
        }
        let deadline = tokio::time::Instant::now() + self.cfg.shutdown_grace;
        while slots.iter().any(|s| s.pid.is_some()) {
            match tokio::time::timeout_at(deadline, exits.recv()).await {
                Ok(Some((i, pid, status))) => {
                    if slots[i].pid == Some(pid) {
                        slots[i].pid = None;
                        if !matches!(&status, Ok(s) if s.success()) {
                            report.released += self.release(pid, &describe(&status)).await;
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    for s in slots.iter().filter(|s| s.pid.is_some()) {
                        let pid = s.pid.unwrap_or_default();
                        warn!(
                            pid,
                            "worker did not stop within the grace period; killing it"
                        );
                        signal(pid, Signal::SIGKILL);
                    }
                    // Collect the killed children and release what they held.
                    while slots.iter().any(|s| s.pid.is_some()) {
                        match exits.recv().await {
                            Some((i, pid, status)) => {
                                if slots[i].pid == Some(pid) {
                                    slots[i].pid = None;
                                    report.released += self.release(pid, &describe(&status)).await;
                                }
                            }
                            None => break,
                        }
                    }
                }
            }
        }
    }
}

fn signal(pid: u32, sig: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(raw), sig);
    }
}

fn describe(status: &std::io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("worker exited with status {c}"),
            (None, Some(sig)) => format!("worker was killed by signal {sig}"),
            _ => "worker ended".into(),
        },
        Err(e) => format!("worker lost: {e}"),
    }
}

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
        let mut backoff = Backoff::new(restart_after, Duration::from_secs(60).max(restart_after));
        loop {
            let started = Instant::now();
            let outcome = tokio::spawn(make()).await;
            if shutdown.is_cancelled() {
                match outcome {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        error!(service = name, error = %e, "service failed while stopping")
                    }
                    Err(e) => error!(service = name, error = %e, "service panicked while stopping"),
                }
                return;
            }
            if started.elapsed() >= Duration::from_secs(60) {
                backoff.reset();
            }
            let wait = backoff.next_delay();
            match outcome {
                Ok(Ok(())) => {
                    warn!(service = name, retry_in = ?wait, "service stopped on its own; starting it again")
                }
                Ok(Err(e)) => {
                    error!(service = name, error = %e, retry_in = ?wait, "service failed; starting it again")
                }
                Err(e) => {
                    error!(service = name, error = %e, retry_in = ?wait, "service panicked; starting it again")
                }
            }
            if crate::service::sleep_or_stop(wait, &shutdown).await {
                return;
            }
        }
    })
}
