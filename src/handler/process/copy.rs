//! One running copy of a process handler's program: its start and hello, one request and answer at a
//! time, its stderr logged under the job it runs, and its stop (retired with EOF, or SIGTERM then
//! SIGKILL to its group).

use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;
use tracing::{debug, info};

use super::{EXIT_GRACE, ProcessConfig, Trouble, protocol};
use crate::handler::JobContext;
use crate::handler::command::{self, GroupGuard};
use crate::sync::lock;

/// What the copy's stderr reader needs to know: which job its lines belong to, and the tail kept for
/// an error message.
#[derive(Default)]
struct StderrState {
    job: Option<(u64, String)>,
    tail: Vec<u8>,
}

/// One running copy of the program.
pub(super) struct Instance {
    program: String,
    child: Child,
    /// Declared after `child`: dropping a copy kills the shim, then SIGKILLs the whole group.
    group: GroupGuard,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<StderrState>>,
    stderr_task: Option<JoinHandle<()>>,
    /// The process jobq started (the exec shim when there is one), whose id is the group's.
    pub(super) pid: u32,
    /// Jobs this copy has answered, counted against `max_jobs_per_process`.
    pub(super) jobs: u32,
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(t) = self.stderr_task.take() {
            t.abort();
        }
    }
}

impl Instance {
    /// Starts a copy and waits for its hello line.
    pub(super) async fn start(
        cfg: &ProcessConfig,
        slot: u32,
        kind: &str,
    ) -> Result<Instance, Trouble> {
        let program = cfg.argv[0].clone();
        let mut cmd = command::program_command(&cfg.argv, &cfg.env, cfg.inherit_env.as_deref());
        cmd.env("JOBQ_PROTOCOL", protocol::VERSION.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {program:?}: {e}"))?;
        let pid = child.id().unwrap_or(0);
        let group = GroupGuard::new(child.id());
        let stderr = Arc::new(Mutex::new(StderrState::default()));
        let stderr_task = child
            .stderr
            .take()
            .map(|pipe| tokio::spawn(log_stderr(pipe, stderr.clone(), kind.to_string(), pid)));
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("cannot start {program:?}: no pipes"));
        };
        let mut copy = Instance {
            program,
            child,
            group,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            stderr,
            stderr_task,
            pid,
            jobs: 0,
        };
        debug!(kind, slot, pid, program = %copy.program, "process handler started a copy");
        match copy.read_line().await {
            Ok(Some(line)) => match protocol::hello(&line) {
                Ok(()) => Ok(copy),
                Err(why) => Err(copy
                    .fail(&format!(
                        "did not start with a protocol v1 hello line ({why}): it wrote {}",
                        protocol::shown(&line)
                    ))
                    .await),
            },
            Ok(None) => Err(copy.exited("before its hello line").await),
            Err(e) => Err(copy.fail(&format!("could not be read from: {e}")).await),
        }
    }

    /// Whether an idle copy is still fit for a job: `None` when it is; else it exited or wrote a line
    /// while no job was running (a broken program), and it is stopped.
    pub(super) async fn idle_trouble(&mut self) -> Option<Trouble> {
        // A zero timeout still polls once: this sees only what is already there.
        let ready = tokio::time::timeout(Duration::ZERO, self.stdout.fill_buf())
            .await
            .map(|r| r.map(|buf| buf.is_empty()));
        match ready {
            Err(_) => None,
            Ok(Ok(true)) => Some(self.exited("while it waited for a job").await),
            Ok(Ok(false)) => {
                let line = self.read_line().await.ok().flatten().unwrap_or_default();
                Some(
                    self.fail(&format!(
                        "wrote a line while it ran no job: {}",
                        protocol::shown(&line)
                    ))
                    .await,
                )
            }
            Ok(Err(e)) => Some(self.fail(&format!("could not be read from: {e}")).await),
        }
    }

    /// Says which job the copy's stderr lines belong to from now on, and starts the tail afresh for
    /// it. The job stays named after its answer: stderr and stdout are separate pipes, so a line the
    /// program wrote before answering can reach the reader after the answer, and it is that job's.
    pub(super) fn attach(&self, job: &JobContext) {
        let mut s = lock(&self.stderr);
        s.job = Some((job.id.0, job.kind.clone()));
        s.tail.clear();
    }

    /// Sends one request and reads its answer, recording on `job` the progress the program reports
    /// before it. Any error leaves the copy stopped.
    pub(super) async fn exchange(
        &mut self,
        request: &[u8],
        job: &JobContext,
    ) -> Result<protocol::Answer, Trouble> {
        let id = job.id.0;
        let written = match self.stdin.as_mut() {
            Some(stdin) => async {
                stdin.write_all(request).await?;
                stdin.flush().await
            }
            .await
            .map_err(|e| e.to_string()),
            None => Err("its stdin is closed".into()),
        };
        // A program that exited before reading its job makes the write fail (EPIPE): say how it ended.
        if written.is_err() {
            return Err(self.exited(&format!("before it read job {id}")).await);
        }
        loop {
            let line = match self.read_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return Err(self.exited(&format!("before it answered job {id}")).await),
                Err(e) => return Err(self.fail(&format!("could not be read from: {e}")).await),
            };
            match protocol::said(&line, id) {
                Ok(protocol::Said::Answer(a)) => return Ok(a),
                // Checked already: a report the context refuses cannot reach here.
                Ok(protocol::Said::Progress { percent, message }) => {
                    let _ = job.progress(percent, message.as_deref()).await;
                }
                Err(why) => {
                    return Err(self
                        .fail(&format!(
                            "wrote a line that is not a protocol v1 answer ({why}): {}",
                            protocol::shown(&line)
                        ))
                        .await);
                }
            }
        }
    }

    /// One line of stdout, newline included if there was one; `None` at EOF.
    pub(super) async fn read_line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut line = Vec::new();
        let limit = protocol::MAX_LINE as u64 + 2;
        let n = (&mut self.stdout)
            .take(limit)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(None);
        }
        if line.len() > protocol::MAX_LINE + 1 {
            return Err(std::io::Error::other(format!(
                "it wrote a line longer than {} bytes: {}",
                protocol::MAX_LINE,
                protocol::shown(&line)
            )));
        }
        Ok(Some(line))
    }

    /// The copy ended (EOF on its stdout or stdin): waits for its exit (stopping it if it lingers) and
    /// says how it ended, with its stderr's tail.
    pub(super) async fn exited(&mut self, when: &str) -> Trouble {
        let status = match tokio::time::timeout(EXIT_GRACE, self.child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => self.terminate(EXIT_GRACE).await,
        };
        let how = status.map_or_else(|| "ended".to_string(), command::describe);
        let tail = self.tail().await;
        format!(
            "{} (process group {}) {how} {when}{}{}",
            self.program,
            self.pid,
            if tail.is_empty() { "" } else { ": " },
            tail
        )
    }

    /// The copy broke the protocol: stops it and says why.
    pub(super) async fn fail(&mut self, why: &str) -> Trouble {
        let _ = self.terminate(EXIT_GRACE).await;
        let tail = self.tail().await;
        format!(
            "{} (process group {}) {why}; it was stopped{}{}",
            self.program,
            self.pid,
            if tail.is_empty() {
                ""
            } else {
                ". Its stderr: "
            },
            tail
        )
    }

    /// Stops a copy in the middle of a job: SIGTERM to its group, SIGKILL after `grace`.
    pub(super) async fn stop(&mut self, grace: Duration) {
        let _ = self.terminate(grace).await;
    }

    /// Retires an idle copy: EOF on its stdin, then SIGTERM, then SIGKILL, [`EXIT_GRACE`] apart.
    pub(super) async fn retire(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(EXIT_GRACE, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.terminate(EXIT_GRACE).await;
        }
        // Whatever the program left behind in its group goes with it.
        self.group.signal(Signal::SIGKILL);
    }

    pub(super) async fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        drop(self.stdin.take());
        self.group.signal(Signal::SIGTERM);
        let status = match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                self.group.signal(Signal::SIGKILL);
                self.child.wait().await.ok()
            }
        };
        self.group.signal(Signal::SIGKILL);
        status
    }

    /// The tail of stderr, once the reader has seen its end (or after a moment).
    pub(super) async fn tail(&mut self) -> String {
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(command::STDERR_DRAIN, task).await;
        }
        let s = lock(&self.stderr);
        String::from_utf8_lossy(&s.tail).trim_end().to_string()
    }
}

/// Logs each stderr line of a copy, under the job it is running, and keeps a tail.
async fn log_stderr(
    pipe: tokio::process::ChildStderr,
    state: Arc<Mutex<StderrState>>,
    kind: String,
    pid: u32,
) {
    let mut lines = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut lines)
            .take(command::STDERR_TAIL as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let job = {
            let mut s = lock(&state);
            s.tail.extend_from_slice(&line);
            if s.tail.len() > command::STDERR_TAIL {
                let cut = s.tail.len() - command::STDERR_TAIL;
                s.tail.drain(..cut);
            }
            s.job.clone()
        };
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        match job {
            Some((job_id, kind)) => info!(job_id, kind = %kind, pid, "{text}"),
            None => info!(kind = %kind, pid, "{text}"),
        }
    }
}
