//! Command handlers: run a configured program for each job.
//!
//! The job's payload is written to the program's stdin; `JOBQ_JOB_ID`, `JOBQ_KIND`, `JOBQ_QUEUE`,
//! `JOBQ_ATTEMPT`, `JOBQ_MAX_ATTEMPTS` and `JOBQ_CLAIM` are in its environment, and so are
//! `JOBQ_PROGRESS_FILE` and `JOBQ_OUTPUT_FILE`, through which it reports (see `command_report.rs`),
//! and `TRACEPARENT` when the job has a trace context (docs/traces.md). Exit status 0 finishes
//! the job; any other status, a signal or a timeout fails it, with the tail of stderr as the error. Its stdout is the worker's stdout.
//! With a `snooze` delay configured, exit status [`EX_TEMPFAIL`] (75) snoozes the job instead: it runs
//! again after that delay, and the attempt does not count (see [`JobError::snooze`]). The delay is the
//! handler's setting rather than something the program prints, because stdout belongs to the job's
//! output and is not read by the worker.
//!
//! The program runs in a process group of its own, so that stopping it (timeout, cancel, shutdown) stops
//! everything it started: SIGTERM to the group, then SIGKILL after a grace period. The group is also
//! killed when the program exits, so a stray background child cannot keep the job's pipes open. Where
//! the program embedding jobq named an exec shim ([`start_through`], as `jobq` does with
//! `jobq-exec-shim`), the program is started through it, so the group also dies when the worker is
//! killed outright.
//!
//! **Environment.** A command inherits the worker's environment *except jobq's secrets*: every `JOBQ_*`
//! variable of the worker (its database URL, password file, config path), `DATABASE_URL` and
//! `MYSQL_PWD`. A job's payload comes from whoever could insert a row; its program has no business
//! with the queue's database credentials. `inherit_env = ["PATH", …]` narrows the inherited variables
//! to a list; `env` adds fixed ones.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::command_report::ReportFiles;
use super::{BoxFuture, Handler, JobContext, JobError};

/// How much of the end of stderr is kept for `last_error`.
pub(crate) const STDERR_TAIL: usize = 4096;

/// How long to keep reading stderr after the program has exited.
pub(crate) const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// The exit status that snoozes a job when the handler has a `snooze` delay: sysexits.h's
/// `EX_TEMPFAIL`, "temporary failure; user is invited to retry", which mail transfer agents already use
/// for "try again later".
pub const EX_TEMPFAIL: i32 = 75;

/// Time between SIGTERM and SIGKILL when a command has to stop.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// Runs one program per job.
#[derive(Debug, Clone)]
pub struct CommandHandler {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    inherit_only: Option<Vec<String>>,
    kill_grace: Duration,
    snooze: Option<Duration>,
}

/// A program that starts each command for the worker and kills it when the worker dies (see
/// `bin/jobq-exec-shim`). It is run as `PROGRAM ARGS… WORKER_PID COMMAND COMMAND_ARGS…`.
#[derive(Debug, Clone)]
pub struct ExecShim {
    /// The shim program.
    pub program: std::path::PathBuf,
    /// Arguments before the worker's pid (a mode switch, say).
    pub args: Vec<String>,
}

static SHIM: std::sync::OnceLock<ExecShim> = std::sync::OnceLock::new();

/// Starts every command of this process through `shim` from now on. Set once, before workers start;
/// later calls are ignored. Without one, commands are started directly and may outlive a worker that
/// is killed outright.
pub fn start_through(shim: ExecShim) {
    let _ = SHIM.set(shim);
}

/// Worker variables never passed to a command (besides every `JOBQ_*` one).
const SECRET_VARS: &[&str] = &["DATABASE_URL", "MYSQL_PWD"];

/// Whether the worker's variable `name` stays out of commands' environments.
fn is_secret(name: &str) -> bool {
    name.starts_with("JOBQ_") || SECRET_VARS.contains(&name)
}

impl CommandHandler {
    /// A handler that runs `argv` with `env` added to the worker's environment (less its secrets).
    pub fn new(argv: Vec<String>, env: BTreeMap<String, String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                argv,
                env,
                inherit_only: None,
                kill_grace: DEFAULT_KILL_GRACE,
                snooze: None,
            }),
        }
    }

    /// With `Some(names)`, only these variables of the worker's environment are inherited.
    pub fn inherit_only(mut self, names: Option<Vec<String>>) -> Self {
        Arc::make_mut(&mut self.inner).inherit_only = names;
        self
    }

    /// With `Some(delay)`, exit status [`EX_TEMPFAIL`] snoozes the job for `delay` instead of failing it.
    pub fn snooze_on_tempfail(mut self, delay: Option<Duration>) -> Self {
        Arc::make_mut(&mut self.inner).snooze = delay;
        self
    }
}

impl Handler for CommandHandler {
    fn call(&self, job: JobContext) -> BoxFuture<Result<(), JobError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(job).await })
    }
}

/// Process groups of commands running now, so a forced exit can take them down too: a command left
/// running after its worker is gone would go on doing the job while the reaper hands it to another.
static RUNNING_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Sends SIGKILL to every command this process is running. Called before a forced exit (the binary's,
/// through `for_the_binary`) and by a fenced worker.
pub(crate) fn kill_all_running() {
    let groups = crate::sync::lock(&RUNNING_GROUPS);
    for &pgid in groups.iter() {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Kills the process group when dropped: if the worker drops the job's future (a hard stop), the
/// program must not live on, and nothing the program left behind may either. While it lives, the group
/// is in [`RUNNING_GROUPS`], so [`kill_all_running`] takes it down before a forced exit.
pub(crate) struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    /// Guards the group led by `pid` (a child started with [`program_command`]).
    pub(crate) fn new(pid: Option<u32>) -> Self {
        let pgid = pid.map(|id| Pid::from_raw(id as i32));
        if let Some(p) = pgid {
            crate::sync::lock(&RUNNING_GROUPS).insert(p.as_raw());
        }
        Self { pgid }
    }

    /// Sends `sig` to the whole group.
    pub(crate) fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.pgid {
            // ESRCH means the group is already gone, which is what we want.
            let _ = killpg(pgid, sig);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
        if let Some(p) = self.pgid {
            crate::sync::lock(&RUNNING_GROUPS).remove(&p.as_raw());
        }
    }
}

impl Inner {
    async fn run(&self, job: JobContext) -> Result<(), JobError> {
        let program = &self.argv[0];
        let files = ReportFiles::create(&job).map_err(|e| {
            JobError::retry(format!(
                "cannot make the job's report directory in {}: {e}",
                std::env::temp_dir().display()
            ))
        })?;
        let mut child = self
            .command(&job, &files)
            .spawn()
            .map_err(|e| JobError::retry(format!("cannot start {program:?}: {e}")))?;
        let guard = GroupGuard::new(child.id());

        // Feed stdin from its own task: a program that does not read its input must not block us, and
        // one that exits early (EPIPE) is not an error of ours.
        let mut stdin = child.stdin.take();
        let payload = job.payload.clone();
        let feeder = tokio::spawn(async move {
            if let Some(stdin) = stdin.as_mut() {
                let _ = stdin.write_all(payload.as_bytes()).await;
                let _ = stdin.shutdown().await;
            }
        });
        let stderr = tokio::spawn(read_tail(child.stderr.take()));

        // The progress file is read once a second while the program runs, and once more after.
        let mut last = None;
        let status = {
            let wait = self.wait(&mut child, &guard, &job);
            tokio::pin!(wait);
            let mut tick = tokio::time::interval(super::report::PROGRESS_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    status = &mut wait => break status,
                    _ = tick.tick() => files.record_progress(&job, &mut last).await,
                }
            }
        };
        files.record_progress(&job, &mut last).await;
        // Whatever the leader did, nothing of the group outlives the job.
        drop(guard);
        feeder.abort();
        let status =
            status.map_err(|e| JobError::retry(format!("waiting for {program:?} failed: {e}")))?;
        // A descendant that left the process group (setsid) may still hold stderr open: do not wait for
        // it past a moment.
        let err_tail = tokio::time::timeout(STDERR_DRAIN, stderr)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        if status.success() {
            return files.record_output(&job).await;
        }
        if let Some(delay) = self.snooze.filter(|_| status.code() == Some(EX_TEMPFAIL)) {
            return Err(JobError::snooze(delay));
        }
        Err(JobError::retry(format!(
            "{program} {}{}{}",
            describe(status),
            if err_tail.trim().is_empty() { "" } else { ": " },
            err_tail.trim_end()
        )))
    }

    /// The command for `job`: see [`program_command`], plus the job's `JOBQ_*` variables.
    fn command(&self, job: &JobContext, files: &ReportFiles) -> Command {
        let mut cmd = program_command(&self.argv, &self.env, self.inherit_only.as_deref());
        cmd.env("JOBQ_JOB_ID", job.id.to_string())
            .env("JOBQ_KIND", &job.kind)
            .env("JOBQ_QUEUE", &job.queue)
            .env("JOBQ_ATTEMPT", job.attempt.to_string())
            .env("JOBQ_MAX_ATTEMPTS", job.max_attempts.to_string())
            .env("JOBQ_CLAIM", &job.claim)
            .env("JOBQ_PROGRESS_FILE", &files.progress)
            .env("JOBQ_OUTPUT_FILE", &files.output)
            .stdin(Stdio::piped())
            // stdout goes where the worker's goes (a terminal, the journal): it is the job's output, not
            // its error report. stderr is captured for last_error.
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped());
        // The job's trace context, under the name OpenTelemetry's SDKs read. A job without one must
        // not pass on the worker's own (a worker started under a TRACEPARENT would otherwise make every
        // such job look like part of that one trace).
        match job.traceparent() {
            Some(t) => cmd.env("TRACEPARENT", t.to_string()),
            None => cmd.env_remove("TRACEPARENT"),
        };
        cmd
    }

    /// Waits for the command; when the job is cancelled (timeout, operator, shutdown, lost claim) its
    /// group gets SIGTERM, then SIGKILL after `kill_grace`.
    async fn wait(
        &self,
        child: &mut Child,
        guard: &GroupGuard,
        job: &JobContext,
    ) -> std::io::Result<ExitStatus> {
        tokio::select! {
            status = child.wait() => status,
            () = job.cancel.cancelled() => {
                guard.signal(Signal::SIGTERM);
                match tokio::time::timeout(self.kill_grace, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        guard.signal(Signal::SIGKILL);
                        child.wait().await
                    }
                }
            }
        }
    }
}

/// `argv` as the worker starts a handler's program: through the exec shim when one is set (see
/// [`start_through`]), in a process group of its own (killed if the `Child` is dropped), with the
/// worker's environment less its secrets (only the `inherit_only` names of it, when given) plus `env`.
/// The caller sets up stdio.
pub(crate) fn program_command(
    argv: &[String],
    env: &BTreeMap<String, String>,
    inherit_only: Option<&[String]>,
) -> Command {
    let mut cmd = match SHIM.get() {
        Some(shim) => {
            let mut c = Command::new(&shim.program);
            c.args(&shim.args)
                .arg(std::process::id().to_string())
                .args(argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    cmd.env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| {
            let name = k.to_string_lossy();
            !is_secret(&name) && inherit_only.is_none_or(|only| only.iter().any(|o| *o == name))
        }))
        .envs(env)
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// How a program ended, as `last_error` says it: "exited with status 3", "was killed by signal 9 (SIGKILL)".
pub(crate) fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(sig) => match Signal::try_from(sig) {
            Ok(s) => format!("was killed by signal {sig} ({})", s.as_str()),
            Err(_) => format!("was killed by signal {sig}"),
        },
        None => "ended abnormally".to_string(),
    }
}

/// Reads a pipe to its end and keeps the last [`STDERR_TAIL`] bytes, as text.
async fn read_tail<R: AsyncRead + Unpin>(pipe: Option<R>) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
        }
    }
    if tail.len() > STDERR_TAIL {
        tail.drain(..tail.len() - STDERR_TAIL);
    }
    String::from_utf8_lossy(&tail).into_owned()
}
