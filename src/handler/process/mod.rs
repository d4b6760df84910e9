//! Process handlers: long-lived programs, in any language, handed one job at a time over a
//! line-delimited JSON protocol ([`protocol`], `docs/process-protocol.md`).
//!
//! A handler keeps a pool of `processes` copies of its program. Each job checks one copy out of the
//! pool, writes one request line to its stdin, reads one answer line from its stdout, and puts the
//! copy back. Copies are started when the worker starts ([`Handler::start`]), and again by a job that
//! finds its slot empty (after a copy was lost or retired), each the way a command handler's program is (`command::program_command`): through the exec shim, in a process group of its own,
//! with the worker's environment less its secrets plus `env`, and with its group in
//! `RUNNING_GROUPS`, so the self-fence's forced exit takes it down and a SIGKILLed worker's copies die
//! with it.
//!
//! A copy that exits, writes a line that is not the protocol, or has to be stopped (the job timed out,
//! was cancelled, the worker shuts down or lost the claim) is stopped whole (SIGTERM to its group, then
//! SIGKILL) and its slot starts a new one for the next job. After a failure of the program (an exit, a
//! bad line, a start that failed) the next start of that slot waits a backoff that doubles per failure in
//! a row, from [`RESTART_BACKOFF_BASE`] to [`RESTART_BACKOFF_CAP`], so a program that crashes on start
//! does not spin. A copy that has run `max_jobs_per_process` jobs is retired (EOF on its stdin; it
//! exits) and replaced. When the worker stops ([`Handler::stop`]), every copy is retired the same way.
//!
//! Invariant: a copy runs at most one job at a time, and a copy whose job did not end with a valid
//! answer never runs another one. Dropping a job's future (the worker abandons a handler that does not
//! stop in time) drops the copy it had checked out, which SIGKILLs its group.

mod copy;
pub mod protocol;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::sync::lock;

use self::copy::Instance;
use super::command;
use super::{BoxFuture, Handler, JobContext, JobError};

/// The first wait before a slot starts its program again after the program failed.
pub const RESTART_BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The longest wait between restarts of a failing program.
pub const RESTART_BACKOFF_CAP: Duration = Duration::from_secs(30);
/// How long a retired copy (recycled, or the worker stopping) has to exit after EOF on its stdin, and
/// then after SIGTERM, before SIGKILL.
pub const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long a copy started with the worker (before any job) has to write its hello line. A copy started
/// for a job has until the job's deadline.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Copies one handler may keep: a bound on a typo (`processes = 1000000`), far above what a worker's
/// concurrency can keep busy.
pub const MAX_PROCESSES: u32 = 256;

/// What a process handler runs and how many copies it keeps (`[handlers.KIND]` with `process = […]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessConfig {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// The only inherited variables of the worker's environment, when set.
    pub inherit_env: Option<Vec<String>>,
    /// Copies of the program, each running one job at a time: 1..=[`MAX_PROCESSES`].
    pub processes: u32,
    /// Jobs a copy runs before it is retired and replaced; `None`: no limit.
    pub max_jobs_per_process: Option<u32>,
    /// Time between SIGTERM and SIGKILL when a copy is stopped in the middle of a job.
    pub kill_grace: Duration,
}

impl ProcessConfig {
    /// One copy of `argv`, no limit on its jobs, the command handlers' kill grace.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            env: BTreeMap::new(),
            inherit_env: None,
            processes: 1,
            max_jobs_per_process: None,
            kill_grace: command::DEFAULT_KILL_GRACE,
        }
    }
}

/// Runs jobs on a pool of long-lived copies of a program (see the module docs).
#[derive(Clone)]
pub struct ProcessHandler {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for ProcessHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessHandler")
            .field("config", &self.pool.cfg)
            .finish()
    }
}

struct Pool {
    cfg: ProcessConfig,
    /// One permit per slot not checked out.
    free_slots: Arc<Semaphore>,
    free: Mutex<Vec<Slot>>,
}

/// A place in the pool: the copy living there, if any, and its restart backoff.
struct Slot {
    number: u32,
    copy: Option<Instance>,
    /// Failures of the program in a row in this slot.
    failures: u32,
    /// No start before this (the backoff after a failure).
    not_before: Option<Instant>,
}

impl Slot {
    fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let backoff = RESTART_BACKOFF_BASE
            .saturating_mul(1u32 << (self.failures - 1).min(16))
            .min(RESTART_BACKOFF_CAP);
        self.not_before = Some(Instant::now() + backoff);
    }

    fn succeeded(&mut self) {
        self.failures = 0;
        self.not_before = None;
    }
}

/// A slot checked out for one job; it goes back to the pool when dropped, whatever happened.
struct Lease {
    pool: Arc<Pool>,
    slot: Option<Slot>,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    fn slot(&mut self) -> &mut Slot {
        self.slot
            .as_mut()
            .expect("a lease holds its slot until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            lock(&self.pool.free).push(slot);
        }
        // The permit is released after this body, once the slot is back.
    }
}

impl ProcessHandler {
    /// A handler with `cfg.processes` slots, none started yet.
    pub fn new(cfg: ProcessConfig) -> Self {
        let n = cfg.processes.clamp(1, MAX_PROCESSES);
        let slots = (1..=n)
            .rev()
            .map(|number| Slot {
                number,
                copy: None,
                failures: 0,
                not_before: None,
            })
            .collect();
        Self {
            pool: Arc::new(Pool {
                cfg,
                free_slots: Arc::new(Semaphore::new(n as usize)),
                free: Mutex::new(slots),
            }),
        }
    }
}

impl Handler for ProcessHandler {
    fn call(&self, job: JobContext) -> BoxFuture<Result<(), JobError>> {
        let pool = self.pool.clone();
        Box::pin(async move { pool.run(job).await })
    }

    fn start(&self, kind: &str) {
        for _ in 0..self.pool.cfg.processes {
            tokio::spawn(self.pool.clone().start_one(kind.to_string()));
        }
    }

    fn stop(&self) -> BoxFuture<()> {
        let pool = self.pool.clone();
        Box::pin(async move {
            // No more checkouts; the worker calls this once its jobs have ended.
            pool.free_slots.close();
            let copies: Vec<Instance> = lock(&pool.free)
                .iter_mut()
                .filter_map(|s| s.copy.take())
                .collect();
            let mut retiring = tokio::task::JoinSet::new();
            for c in copies {
                retiring.spawn(c.retire());
            }
            while retiring.join_next().await.is_some() {}
        })
    }
}

/// Why a copy cannot go on, as `last_error` says it.
type Trouble = String;

impl Pool {
    fn program(&self) -> &str {
        &self.cfg.argv[0]
    }

    /// Starts the copy of one free slot that has none, when the worker starts. A failure is logged and
    /// starts the slot's backoff; the slot's next job tries again.
    async fn start_one(self: Arc<Self>, kind: String) {
        let Ok(permit) = self.free_slots.clone().try_acquire_owned() else {
            return;
        };
        let slot = lock(&self.free).pop().expect("a permit means a free slot");
        let mut lease = Lease {
            pool: self.clone(),
            slot: Some(slot),
            _permit: permit,
        };
        if lease.slot().copy.is_some() {
            return;
        }
        let number = lease.slot().number;
        // Dropping the start at the time limit kills what it started.
        match tokio::time::timeout(START_TIMEOUT, Instance::start(&self.cfg, number, &kind)).await {
            Ok(Ok(copy)) if self.free_slots.is_closed() => {
                tokio::spawn(copy.retire());
            }
            Ok(Ok(copy)) => lease.slot().copy = Some(copy),
            Ok(Err(trouble)) => {
                lease.slot().failed();
                warn!(kind, error = %trouble, "process handler could not start its program");
            }
            Err(_) => {
                lease.slot().failed();
                warn!(kind, program = %self.program(), "process handler's program wrote no hello line within {}; stopped it",
                      humantime::format_duration(START_TIMEOUT));
            }
        }
    }

    // Long on purpose: one job's way through the pool, top to bottom, every early return dropping its lease.
    async fn run(self: Arc<Self>, job: JobContext) -> Result<(), JobError> {
        // Before a copy is checked out: a payload that is not JSON must not cost a healthy copy.
        let request = protocol::request(&job)?;
        let permit = tokio::select! {
            p = self.free_slots.clone().acquire_owned() => p.map_err(|_| {
                JobError::retry("the worker is stopping; its process handler takes no more jobs")
            })?,
            () = job.cancelled() => {
                return Err(JobError::retry(format!(
                    "stopped while waiting for a free copy of {} (all {} busy)",
                    self.program(), self.cfg.processes
                )));
            }
        };
        let slot = lock(&self.free).pop().expect("a permit means a free slot");
        let mut lease = Lease {
            pool: self.clone(),
            slot: Some(slot),
            _permit: permit,
        };
        // A copy that died or wrote something while it waited is replaced before the job is sent: the
        // job has nothing to do with it.
        let idle = match lease.slot().copy.take() {
            Some(mut c) => match c.idle_trouble().await {
                None => Some(c),
                Some(trouble) => {
                    lease.slot().failed();
                    warn!(kind = %job.kind, error = %trouble, "process handler's idle copy was lost; starting another");
                    None
                }
            },
            None => None,
        };
        let mut copy = match idle {
            Some(c) => c,
            None => {
                let not_before = lease.slot().not_before;
                let started = tokio::select! {
                    r = async {
                        if let Some(t) = not_before {
                            tokio::time::sleep_until(t).await;
                        }
                        Instance::start(&self.cfg, lease.slot().number, &job.kind).await
                    } => Some(r),
                    () = job.cancelled() => None,
                };
                match started {
                    Some(Ok(c)) => c,
                    Some(Err(trouble)) => {
                        lease.slot().failed();
                        warn!(kind = %job.kind, job_id = job.id.0, error = %trouble, "process handler could not start its program");
                        return Err(JobError::retry(trouble));
                    }
                    None => {
                        return Err(JobError::retry(format!(
                            "stopped while starting {}",
                            self.program()
                        )));
                    }
                }
            }
        };

        copy.attach(&job);
        let answered = tokio::select! {
            r = copy.exchange(&request, &job) => Some(r),
            () = job.cancelled() => None,
        };
        let answer = match answered {
            None => {
                let pid = copy.pid;
                copy.stop(self.cfg.kill_grace).await;
                return Err(JobError::retry(format!(
                    "{} (process group {pid}) was stopped before it answered (timeout, cancel or shutdown); \
                     a new copy takes its place",
                    self.program()
                )));
            }
            Some(Ok(answer)) => answer,
            Some(Err(trouble)) => {
                lease.slot().failed();
                warn!(kind = %job.kind, job_id = job.id.0, error = %trouble, "process handler's program failed; replacing it");
                return Err(JobError::retry(trouble));
            }
        };
        copy.jobs += 1;
        let slot = lease.slot();
        slot.succeeded();
        if self
            .cfg
            .max_jobs_per_process
            .is_some_and(|max| copy.jobs >= max)
        {
            debug!(kind = %job.kind, pid = copy.pid, jobs = copy.jobs, "retiring a process handler's copy after its last job");
            // Its exit is waited for beside the next jobs; its group stays guarded until it is gone.
            tokio::spawn(copy.retire());
        } else {
            slot.copy = Some(copy);
        }
        answer.into_result(&job).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zombie counts as gone: it has exited and waits only to be reaped.
    fn gone(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => matches!(
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next()),
                Some("Z" | "X")
            ),
        }
    }

    /// A handler whose program is the shell script `script`, with `$DIR` a scratch directory.
    fn handler(script: &str) -> (ProcessHandler, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("jobq-process-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cfg = ProcessConfig::new(vec!["/bin/sh".into(), "-c".into(), script.into()]);
        cfg.env
            .insert("DIR".into(), dir.to_string_lossy().into_owned());
        (ProcessHandler::new(cfg), dir)
    }

    async fn pid_in(file: std::path::PathBuf) -> u32 {
        for _ in 0..500 {
            if let Ok(text) = std::fs::read_to_string(&file)
                && let Ok(pid) = text.trim().parse()
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no pid in {}", file.display());
    }

    async fn wait_gone(pid: u32) {
        for _ in 0..500 {
            if gone(pid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("process {pid} still runs");
    }

    #[tokio::test]
    async fn dropping_a_jobs_future_kills_the_copy_running_it() {
        let (h, dir) =
            handler(r#"echo '{"jobq":1,"ready":true}'; read line; echo $$ > "$DIR/pid"; sleep 30"#);
        let task = tokio::spawn(h.call(JobContext::for_test("k", "{}")));
        let pid = pid_in(dir.join("pid")).await;
        assert!(!gone(pid));
        task.abort();
        let _ = task.await;
        wait_gone(pid).await;
        std::fs::remove_dir_all(&dir).ok();
    }

    #[tokio::test]
    async fn stopping_the_handler_retires_its_idle_copies() {
        let (h, dir) = handler(
            r#"echo $$ > "$DIR/pid"; echo '{"jobq":1,"ready":true}'
               while read line; do echo '{"id":1,"ok":true}'; done"#,
        );
        h.call(JobContext::for_test("k", "{}")).await.unwrap();
        let pid = pid_in(dir.join("pid")).await;
        assert!(!gone(pid), "an idle copy stays for the next job");
        let started = std::time::Instant::now();
        h.stop().await;
        wait_gone(pid).await;
        assert!(started.elapsed() < EXIT_GRACE, "EOF on stdin ends it");
        let e = h.call(JobContext::for_test("k", "{}")).await.unwrap_err();
        assert!(e.message().contains("stopping"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn restarts_back_off_and_a_good_answer_resets_them() {
        let mut slot = Slot {
            number: 1,
            copy: None,
            failures: 0,
            not_before: None,
        };
        let now = Instant::now();
        let waits: Vec<Duration> = (0..9)
            .map(|_| {
                slot.failed();
                slot.not_before.unwrap().duration_since(now)
            })
            .collect();
        assert!(waits[0] >= RESTART_BACKOFF_BASE && waits[0] < RESTART_BACKOFF_BASE * 2);
        assert!(waits[1] >= RESTART_BACKOFF_BASE * 2);
        assert!(waits[8] <= RESTART_BACKOFF_CAP + Duration::from_millis(100));
        slot.succeeded();
        assert_eq!((slot.failures, slot.not_before), (0, None));
    }
}
