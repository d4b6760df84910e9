//! Handlers: what runs a job of a given kind.
//!
//! A handler gets a [`JobContext`] and returns `Ok(())` (the job is done) or a [`JobError`] (it failed and
//! is retried with backoff, or is dead at once if the error is fatal). The stock binary builds command,
//! SQL and HTTP handlers from `jobq.toml`; library users register async functions by kind.
//!
//! The context carries the claim token and attempt number: a handler whose side effects must not be
//! applied twice can fence them with the same pair the worker uses to finish the job.

pub mod command;
pub mod http;
pub mod process;
// Public only for the `jobq` binary, which checks with it that its exec shim can be started; not part
// of the library's API.
#[doc(hidden)]
pub mod program;
pub mod sql;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::name::Name;
use crate::retry::RetryPolicy;

/// A boxed, sendable future: what a [`Handler`] returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler knows about the job it runs.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// Row id.
    pub id: crate::job::JobId,
    /// Job kind.
    pub kind: String,
    /// Queue it came from.
    pub queue: String,
    /// This attempt, starting at 1.
    pub attempt: u16,
    /// Attempts allowed: the job's own `max_attempts`, else its handler's, else 20.
    pub max_attempts: u16,
    /// The claim token on the row while this attempt runs. Together with `attempt` it fences side
    /// effects: `UPDATE … WHERE id = ? AND claim = ? AND attempts = ?` in the handler's own transaction
    /// changes nothing if the claim has been lost.
    pub claim: String,
    pub(crate) payload: String,
    pub(crate) cancel: CancellationToken,
    /// When the attempt must have ended: its start plus the job's timeout, by the worker's clock.
    pub(crate) deadline: chrono::DateTime<chrono::Utc>,
    /// When the job was due: the claim's time less how long the row had been due then.
    pub(crate) run_at: chrono::DateTime<chrono::Utc>,
    /// Who made the job's done finish, when not the worker (see [`Finished`]).
    pub(crate) finished: Arc<AtomicU8>,
}

/// Who made a job's done finish when its handler returned `Ok(())`, as a [`JobContext`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Finished {
    /// Nobody yet: the worker finishes the job.
    ByWorker = 0,
    /// [`JobContext::finish_in`] changed the row in the handler's transaction.
    InTransaction = 1,
    /// The application said it did ([`JobContext::finished_by_application`]); the worker checks.
    ByApplication = 2,
}

impl Finished {
    pub(crate) fn of(cell: &AtomicU8) -> Self {
        match cell.load(Ordering::SeqCst) {
            1 => Self::InTransaction,
            2 => Self::ByApplication,
            _ => Self::ByWorker,
        }
    }
}

impl JobContext {
    /// The payload as JSON text, exactly as stored.
    pub fn payload_str(&self) -> &str {
        &self.payload
    }

    /// The payload decoded into `T`. A payload of the wrong shape fails the job for good (retrying
    /// cannot change it).
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        serde_json::from_str(&self.payload).map_err(|e| {
            JobError::fatal(format!(
                "payload does not fit {}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }

    /// Ends this job `done` inside the caller's own transaction on `conn`, fenced by the claim token
    /// and attempt: transactional completion. Commit it with the job's effects and they happen exactly
    /// once, however the worker dies or loses its claim: a copy whose claim was taken away gets `false`
    /// here and must roll back, and a worker killed before the commit leaves neither the effects nor the
    /// finish. Then the worker does not finish the job itself.
    ///
    /// On `Ok(true)`, commit and return `Ok(())` (if the commit fails, return the error: the worker's
    /// own fenced finish then records the failure, or does nothing if the commit went through after
    /// all). On `Ok(false)`, roll back and return an error: the job belongs to another attempt now.
    ///
    /// # Errors
    /// The driver's error; roll back and return it.
    pub async fn finish_in(
        &self,
        conn: &mut sqlx::MySqlConnection,
    ) -> std::result::Result<bool, sqlx::Error> {
        let done = crate::db::finish::done_in(conn, self.id.0, &self.claim, self.attempt).await?;
        if done {
            self.finished
                .store(Finished::InTransaction as u8, Ordering::SeqCst);
        }
        Ok(done)
    }

    /// Says that the application finished this job itself, in its own transaction next to its own
    /// writes, with `CALL jobq_finish(id, claim, attempt)` (schema 21): what an HTTP or process handler
    /// calls when the application answers so. Return `Ok(())` after it. The worker then does not finish
    /// the job but reads the row: a row that no longer carries this claim was finished (its dependents
    /// are released then); a row that still does was not (the application's transaction rolled back, or
    /// it never called the procedure), and the attempt fails with an error that says so, so that its
    /// effects are not taken as done.
    pub fn finished_by_application(&self) {
        self.finished
            .store(Finished::ByApplication as u8, Ordering::SeqCst);
    }

    /// When this attempt must have ended: its start plus the job's timeout (the row's `timeout_secs`,
    /// else its handler's, else the worker's default), by the worker's clock. The worker cancels the
    /// attempt then ([`JobContext::cancelled`]); a handler that calls elsewhere passes it on.
    pub fn deadline(&self) -> chrono::DateTime<chrono::Utc> {
        self.deadline
    }

    /// When the job was due: the time of its claim less how long the row had been due then (measured by
    /// the database's clock), to the microsecond.
    pub fn run_at(&self) -> chrono::DateTime<chrono::Utc> {
        self.run_at
    }

    /// Resolves when the job should stop: its timeout passed, the worker is shutting down for good, or an
    /// operator cancelled it. Long handlers should select on it and return promptly.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// True once [`JobContext::cancelled`] has resolved.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The cancellation token itself, to hand to code that takes one.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// A context for tests and examples that call a handler directly.
    pub fn for_test(kind: &str, payload: &str) -> Self {
        Self {
            id: crate::job::JobId(1),
            kind: kind.into(),
            queue: "default".into(),
            attempt: 1,
            max_attempts: 1,
            claim: "test".into(),
            payload: payload.into(),
            cancel: CancellationToken::new(),
            deadline: chrono::Utc::now() + chrono::Duration::minutes(30),
            run_at: chrono::Utc::now(),
            finished: Arc::default(),
        }
    }
}

/// An attempt that did not succeed: it failed (retried with backoff, or dead at once if fatal), or it
/// asked to run again later without failing (a snooze).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    message: String,
    kind: ErrorKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    Retry,
    RetryAfter(Duration),
    Fatal,
    Snooze(Duration),
}

impl JobError {
    /// A failure worth retrying (the default): the job runs again after a backoff, until max_attempts.
    pub fn retry(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: ErrorKind::Retry,
        }
    }

    /// A failure worth retrying after `delay` (by the database clock) instead of the backoff's next
    /// step: the program knows better (a rate limit's reset, a `Retry-After`). It counts as an attempt
    /// like [`JobError::retry`]; at `max_attempts` the job is dead.
    pub fn retry_after(message: impl Into<String>, delay: Duration) -> Self {
        Self {
            message: message.into(),
            kind: ErrorKind::RetryAfter(delay),
        }
    }

    /// A failure retrying cannot fix: the job is dead at once.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: ErrorKind::Fatal,
        }
    }

    /// Not a failure: run the job again after `delay` (by the database clock). The attempt is not
    /// counted, so a job that snoozes while it waits for something (a rate limit, a file that is not
    /// there yet) never uses up its `max_attempts`, which keeps bounding real failures. The row goes
    /// back to `queued` with its `last_error` untouched, and `jobq_attempts` records the attempt as
    /// `snoozed`. A delay that would put `run_at` past what a TIMESTAMP holds (2038-01-19) is refused:
    /// the attempt then fails with an error that says so.
    pub fn snooze(delay: Duration) -> Self {
        Self {
            message: format!("snoozed for {}", humantime::format_duration(delay)),
            kind: ErrorKind::Snooze(delay),
        }
    }

    /// The message kept in `last_error` (for a snooze, which keeps `last_error` as it was: the one
    /// recorded in `jobq_attempts`).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when the job must not be retried.
    pub fn is_fatal(&self) -> bool {
        self.kind == ErrorKind::Fatal
    }

    /// The delay a [`JobError::retry_after`] asked for; None for every other error.
    pub fn retry_delay(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::RetryAfter(d) => Some(d),
            _ => None,
        }
    }

    /// The delay of a [`JobError::snooze`]; None for failures.
    pub fn snoozed(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::Snooze(d) => Some(d),
            _ => None,
        }
    }
}

/// When a snooze of `delay` from `now` ends, or why it cannot: `run_at` is a TIMESTAMP, and past its
/// range MariaDB would store the current time instead and the job would run again at once.
pub(crate) fn snooze_until(
    delay: Duration,
    now: chrono::DateTime<chrono::Utc>,
) -> std::result::Result<chrono::DateTime<chrono::Utc>, String> {
    let until = chrono::Duration::from_std(delay)
        .ok()
        .and_then(|d| now.checked_add_signed(d));
    match until {
        Some(t) if crate::job::storable(&t) => Ok(t),
        _ => Err(format!(
            "a snooze of {} would put run_at past what a TIMESTAMP holds ({})",
            humantime::format_duration(delay),
            crate::job::timestamp_range_text()
        )),
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Any error converts into a retryable [`JobError`], so handlers can use `?`.
impl<E: std::error::Error> From<E> for JobError {
    fn from(e: E) -> Self {
        JobError::retry(e.to_string())
    }
}

/// Runs jobs of one kind. Implemented for every `Fn(JobContext) -> impl Future<Output = Result<(), JobError>>`.
pub trait Handler: Send + Sync + 'static {
    /// Runs one attempt.
    fn call(&self, job: JobContext) -> BoxFuture<Result<(), JobError>>;

    /// Called once when a worker starts with this handler registered for `kind`, inside the worker's
    /// runtime: a handler that keeps something alive between jobs (a process handler's programs) may
    /// start it here, in tasks of its own (this must not block). By default, nothing.
    fn start(&self, kind: &str) {
        let _ = kind;
    }

    /// Called once when the worker stops, after its last job has ended: a handler that keeps something
    /// alive between jobs (a process handler's programs) lets it go here. By default, nothing.
    fn stop(&self) -> BoxFuture<()> {
        Box::pin(async {})
    }
}

impl<F, Fut> Handler for F
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    fn call(&self, job: JobContext) -> BoxFuture<Result<(), JobError>> {
        Box::pin(self(job))
    }
}

/// A registered handler and how the worker treats its jobs.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) options: HandlerOptions,
}

/// How a worker treats the jobs of one kind besides running them: the settings of `[handlers.KIND]`,
/// or of [`Handlers::register_with_options`]. A field left `None` falls back to the job's own value or
/// the worker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandlerOptions {
    /// Run-time limit for jobs of this kind that set none themselves (`timeout_secs`).
    pub timeout: Option<Duration>,
    /// Attempts before a job of this kind is dead, for the jobs that set no `max_attempts` of their own
    /// (the column is NULL unless the enqueuer set one; without this, such a job gets
    /// [`crate::DEFAULT_MAX_ATTEMPTS`]). A job's own number wins: whoever enqueued it asked for it, as
    /// a job's own `timeout_secs` wins over the handler's timeout. The worker writes the bound it
    /// applied into a row that had none when an attempt fails, so the row, `jobq jobs show` and the
    /// `jobq_jobs` view show what the job was judged by.
    pub max_attempts: Option<u16>,
    /// The backoff between failed attempts of this kind, instead of the worker's.
    pub retry: Option<RetryPolicy>,
}

impl HandlerOptions {
    /// Checks the values; the message names the field.
    ///
    /// # Errors
    /// `max_attempts` of 0, a zero timeout, or a retry policy [`RetryPolicy::check`] refuses.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.max_attempts == Some(0) {
            return Err("max_attempts must be at least 1".into());
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err("timeout must be above zero".into());
        }
        if let Some(r) = &self.retry {
            r.check("retry_base", "retry_cap")?;
        }
        Ok(())
    }
}

/// A handler definition after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerSpec {
    /// Run a program.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Extra environment.
        env: BTreeMap<String, String>,
        /// The only inherited variables, when set.
        inherit_env: Option<Vec<String>>,
        /// The delay of a snooze when the program exits with [`command::EX_TEMPFAIL`]; `None`: that
        /// status is a failure like any other.
        snooze: Option<Duration>,
    },
    /// Hand jobs to long-lived copies of a program, one at a time (see [`process`]).
    Process(process::ProcessConfig),
    /// Run one SQL statement.
    Sql {
        /// The statement.
        sql: String,
        /// Payload fields for its placeholders.
        params: Vec<String>,
        /// Run the statement and the job's done finish in one transaction (see
        /// [`JobContext::finish_in`]): effects in the same database then happen exactly once.
        transactional: bool,
    },
    /// POST each job to an HTTP endpoint.
    Http(http::HttpSpec),
}

/// Handlers by kind. A worker claims only the kinds registered here; jobs of other kinds wait for a worker
/// that has a handler for them.
#[derive(Clone, Default)]
pub struct Handlers {
    map: BTreeMap<String, Entry>,
}

impl fmt::Debug for Handlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handlers")
            .field("kinds", &self.kinds())
            .finish()
    }
}

impl Handlers {
    /// No handlers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` for `kind`, replacing any earlier one.
    ///
    /// # Errors
    /// When `kind` is not a valid kind name (ASCII letters, digits and `_ - . : /`, at most 128).
    pub fn register(self, kind: &str, handler: impl Handler) -> Result<Self> {
        self.register_with_timeout(kind, handler, None)
    }

    /// Registers `handler` with a run-time limit for jobs of this kind that set none themselves.
    pub fn register_with_timeout(
        self,
        kind: &str,
        handler: impl Handler,
        timeout: Option<Duration>,
    ) -> Result<Self> {
        self.register_with_options(
            kind,
            handler,
            HandlerOptions {
                timeout,
                ..HandlerOptions::default()
            },
        )
    }

    /// Registers `handler` with per-kind settings: run-time limit, attempts, backoff.
    ///
    /// # Errors
    /// When `kind` is not a valid kind name, or an option is out of range (see
    /// [`HandlerOptions::check`]); nothing is registered then.
    pub fn register_with_options(
        mut self,
        kind: &str,
        handler: impl Handler,
        options: HandlerOptions,
    ) -> Result<Self> {
        Name::Kind.check(kind)?;
        options
            .check()
            .map_err(|reason| crate::error::Error::Handler {
                kind: kind.to_string(),
                reason,
            })?;
        self.map.insert(
            kind.to_string(),
            Entry {
                handler: Arc::new(handler),
                options,
            },
        );
        Ok(self)
    }

    /// Registers the command, process, SQL or HTTP handler `spec` describes (see
    /// [`crate::config::Config::handlers`]).
    ///
    /// # Errors
    /// An invalid kind or option; for an HTTP handler, a secret or CA file that cannot be read.
    pub(crate) fn register_spec(
        self,
        kind: &str,
        spec: HandlerSpec,
        options: HandlerOptions,
        pool: &sqlx::MySqlPool,
    ) -> Result<Self> {
        match spec {
            HandlerSpec::Command {
                argv,
                env,
                inherit_env,
                snooze,
            } => self.register_with_options(
                kind,
                command::CommandHandler::new(argv, env)
                    .inherit_only(inherit_env)
                    .snooze_on_tempfail(snooze),
                options,
            ),
            HandlerSpec::Process(cfg) => {
                self.register_with_options(kind, process::ProcessHandler::new(cfg), options)
            }
            HandlerSpec::Sql {
                sql,
                params,
                transactional,
            } => self.register_with_options(
                kind,
                sql::SqlHandler::new(pool.clone(), sql, params).transactional(transactional),
                options,
            ),
            HandlerSpec::Http(spec) => {
                let handler = spec
                    .build()
                    .map_err(|reason| crate::error::Error::Handler {
                        kind: kind.to_string(),
                        reason,
                    })?;
                self.register_with_options(kind, handler, options)
            }
        }
    }

    /// Starts every handler ([`Handler::start`]).
    pub(crate) fn start_all(&self) {
        for (kind, e) in &self.map {
            e.handler.start(kind);
        }
    }

    /// Stops every handler ([`Handler::stop`]), all at once.
    pub(crate) async fn stop_all(&self) {
        let mut stops = tokio::task::JoinSet::new();
        for e in self.map.values() {
            stops.spawn(e.handler.stop());
        }
        while stops.join_next().await.is_some() {}
    }

    /// The registered kinds, sorted.
    pub fn kinds(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    /// True when no handler is registered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn get(&self, kind: &str) -> Option<&Entry> {
        self.map.get(kind)
    }
}
