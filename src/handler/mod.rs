//! Handlers: what runs a job of a given kind.
//!
//! A handler gets a [`JobContext`] and returns `Ok(())` (the job is done) or a [`JobError`] (it failed and
//! is retried with backoff, or is dead at once if the error is fatal). The stock binary builds command,
//! SQL and HTTP handlers from `jobq.toml`; library users register async functions by kind.
//!
//! The context carries the claim token and attempt number: a handler whose side effects must not be
//! applied twice can fence them with the same pair the worker uses to finish the job.

pub mod command;
mod command_report;
mod context;
mod error;
pub mod http;
pub mod process;
mod report;
// `find_program` is public only for the `jobq` binary (through `for_the_binary`), which checks with
// it that its exec shim can be started.
pub(crate) mod program;
pub mod sql;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use context::Finished;
pub use context::JobContext;
pub use error::JobError;
pub(crate) use error::snooze_until;
pub(crate) use report::Reporter;

use crate::error::Result;
use crate::name::Name;
use crate::retry::RetryPolicy;

/// A boxed, sendable future: what a [`Handler`] returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

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
    /// [`crate::admin::DEFAULT_MAX_ATTEMPTS`]). A job's own number wins: whoever enqueued it asked for it, as
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
