//! The library's error type. Each message names the thing that is wrong and, where there is one, the fix.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A `Result` with jobq's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the library can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file could not be read, parsed or validated.
    #[error("config {}: {message}", path.display())]
    Config {
        /// The file that was read.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// A configured handler cannot work as configured (its program cannot be found or run).
    #[error("handlers.{kind}: {reason}")]
    Handler {
        /// The job kind the handler is for.
        kind: String,
        /// What is wrong.
        reason: String,
    },

    /// A setting, argument or field given in code, on the command line or in a request is out of range
    /// or malformed.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What is wrong, as the user names it: a setting (`worker concurrency`), an argument
        /// (`run_at`), a field (`queue`).
        what: &'static str,
        /// Why, and the fix where there is one.
        reason: String,
    },

    /// A `traceparent` given to an enqueue is not valid W3C trace context.
    #[error("invalid traceparent {value:?}: {source}")]
    Traceparent {
        /// The value as given.
        value: String,
        /// Which rule it breaks.
        #[source]
        source: crate::traceparent::TraceparentError,
    },

    /// The database URL does not parse.
    #[error("invalid database URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL with any password masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The server could not be reached or refused the login.
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The URL with any password masked.
        url: String,
        /// What kind of failure: an unreachable server is worth waiting for, a refused login is not.
        kind: ConnectFailure,
        /// The server's or the network's reason.
        reason: String,
    },

    /// The schema is missing or older than this build needs.
    #[error(
        "database {database:?} is not migrated (schema version {}, this jobq needs {need}); run `jobq migrate`",
        found.map_or_else(|| "none".to_string(), |v| v.to_string())
    )]
    NotMigrated {
        /// The database that was checked.
        database: String,
        /// The version found, if any.
        found: Option<i64>,
        /// The version this build needs.
        need: i64,
    },

    /// jobq is still at work in a database whose schema was to be removed.
    #[error(
        "database {database} is in use: {reason}; stop its workers and let its jobs end first, or force it"
    )]
    InUse {
        /// The database that was checked.
        database: String,
        /// What is still there: live processes, unfinished jobs.
        reason: String,
    },

    /// The schema is newer than this build knows.
    #[error(
        "database {database:?} has schema version {found}, newer than this jobq knows ({known}); upgrade jobq"
    )]
    SchemaTooNew {
        /// The database that was checked.
        database: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },

    /// A statement of one migration failed; the migrations before it are applied, and a new run starts
    /// again at this one.
    #[error("{name}: {source}")]
    Migration {
        /// The migration's file in `migrations/`.
        name: &'static str,
        /// What the server answered.
        #[source]
        source: sqlx::Error,
    },

    /// Another `jobq migrate` held the migration lock for as long as this one waited.
    #[error(
        "another `jobq migrate` has held the migration lock for {} s; try again",
        waited.as_secs()
    )]
    MigrationLocked {
        /// How long this migration waited for the lock.
        waited: Duration,
    },

    /// A job payload is not valid JSON.
    #[error("payload is not valid JSON: {0}")]
    Payload(#[source] serde_json::Error),

    /// No job has this id.
    #[error("job {0} not found")]
    JobNotFound(crate::id::JobId),

    /// The job is in a state that does not allow the operation.
    #[error("job {id} is {state}: {reason}")]
    JobState {
        /// The job.
        id: crate::id::JobId,
        /// Its current state.
        state: String,
        /// Why the operation cannot be done in that state.
        reason: &'static str,
    },

    /// The job cannot become live again: another live job of its kind holds its unique key.
    #[error(
        "job {id} cannot run again: job {holder} ({kind}, {holder_state}) holds its unique key {key:?}; \
         wait for that job to end, or cancel it"
    )]
    UniqueKeyHeld {
        /// The job that was to run again.
        id: crate::id::JobId,
        /// Its kind (a key is unique within its kind).
        kind: String,
        /// Its unique key.
        key: String,
        /// The live job that holds the key.
        holder: crate::id::JobId,
        /// That job's state.
        holder_state: String,
    },

    /// A schedule spec or its time zone is invalid; `reason` says what and where (cron field, token).
    #[error("invalid schedule spec {spec:?}: {reason}")]
    Spec {
        /// The spec as written.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },

    /// No schedule has this name.
    #[error("schedule {name:?}: no such schedule (`jobq schedule list` shows them all)")]
    ScheduleNotFound {
        /// The name asked for.
        name: String,
    },

    /// A schedule of this name exists already.
    #[error("schedule {name:?}: already exists; change it with `jobq schedule update`")]
    ScheduleExists {
        /// The name.
        name: String,
    },

    /// The schedule's state does not allow the operation.
    #[error("schedule {name:?} is {state}; {reason}")]
    ScheduleState {
        /// The schedule.
        name: String,
        /// Its current state (`enabled`, `paused`, `finished`, `broken`).
        state: String,
        /// What is allowed instead, and how to get there.
        reason: &'static str,
    },

    /// A schedule's definition is invalid (the spec and time zone are [`Error::Spec`]), or leaves it no
    /// planned time; `reason` names the field.
    #[error("schedule {name:?}: {reason}")]
    ScheduleInvalid {
        /// The schedule.
        name: String,
        /// What is wrong, naming the field.
        reason: String,
    },

    /// A run of the schedule for this very planned time exists already (each planned time gets one job).
    #[error("schedule {name:?}: a run for {planned_at} exists already; try again")]
    ScheduleRunExists {
        /// The schedule.
        name: String,
        /// The planned time that has its run.
        planned_at: DateTime<Utc>,
    },

    /// A statement failed.
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),

    /// A task of jobq's own (a job's handler, the finisher, an in-process service) ended without
    /// answering: it panicked, was cancelled, or had stopped.
    #[error("{task} {reason}")]
    Task {
        /// Which task: `handler`, `finisher`, `reaper`, `scheduler`.
        task: &'static str,
        /// What happened to it: `panicked: <its message>`, `task was cancelled`, `has stopped`.
        reason: String,
    },

    /// An operating-system call (spawning a command, signals) failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a connection could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// No answer, a refused or reset connection, or too many connections: it may work later.
    Unreachable,
    /// The login was refused.
    AccessDenied,
    /// The database does not exist.
    UnknownDatabase,
    /// TLS was required, or its handshake or the server's certificate failed.
    Tls,
    /// Anything else the server said.
    Other,
}

impl Error {
    /// The error of task `task` that ended without returning: it panicked (its message is kept) or
    /// was cancelled.
    pub(crate) fn task_failed(task: &'static str, join: tokio::task::JoinError) -> Error {
        if join.is_cancelled() {
            return Error::Task {
                task,
                reason: "task was cancelled".to_string(),
            };
        }
        Error::panicked(task, join.into_panic())
    }

    /// The error of `task`, which panicked with `payload` (its message is kept).
    pub(crate) fn panicked(task: &'static str, payload: Box<dyn std::any::Any + Send>) -> Error {
        let text = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        Error::Task {
            task,
            reason: format!("panicked: {text}"),
        }
    }

    /// [`Error::Invalid`]: `what` is wrong, and `reason` says why.
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            reason: reason.into(),
        }
    }

    /// True for failures that are worth retrying as they are: deadlocks, lock-wait timeouts and
    /// lost connections. The claim and finish paths retry these internally.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Db(e) => crate::errno::is_transient(e),
            _ => false,
        }
    }

    /// A transaction that lost a race: a deadlock, a lock wait that timed out, or (on a Galera cluster)
    /// a certification conflict with another node, which the server reports as a deadlock. Expected
    /// under contention; the statement is simply tried again.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, Error::Db(e) if crate::errno::is_lock_conflict(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_task_is_named_with_its_panic_message() {
        let panicked = tokio::spawn(async { panic!("index out of range") })
            .await
            .unwrap_err();
        let e = Error::task_failed("handler", panicked);
        assert!(
            matches!(
                e,
                Error::Task {
                    task: "handler",
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "handler panicked: index out of range");
        let formatted = tokio::spawn(async { panic!("{} of {}", 1, 2) })
            .await
            .unwrap_err();
        assert_eq!(
            Error::task_failed("reaper", formatted).to_string(),
            "reaper panicked: 1 of 2"
        );
        let task = tokio::spawn(std::future::pending::<()>());
        task.abort();
        let cancelled = task.await.unwrap_err();
        assert_eq!(
            Error::task_failed("handler", cancelled).to_string(),
            "handler task was cancelled"
        );
        assert!(
            !Error::task_failed("x", tokio::spawn(async { panic!() }).await.unwrap_err())
                .is_transient()
        );
    }
}
