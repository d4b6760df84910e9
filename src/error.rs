//! The library's error type. Each message names the thing that is wrong and, where there is one, the fix.

use std::path::PathBuf;

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

    /// A setting given in code or on the command line is out of range or malformed.
    #[error("{0}")]
    InvalidArgument(String),

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

    /// A job payload is not valid JSON.
    #[error("payload is not valid JSON: {0}")]
    Payload(#[source] serde_json::Error),

    /// No job has this id.
    #[error("job {0} not found")]
    JobNotFound(u64),

    /// The job is in a state that does not allow the operation.
    #[error("job {id} is {state}: {reason}")]
    JobState {
        /// The job.
        id: u64,
        /// Its current state.
        state: String,
        /// Why the operation cannot be done in that state.
        reason: &'static str,
    },

    /// A schedule spec or its time zone is invalid; `reason` says what and where (cron field, token).
    #[error("invalid schedule spec {spec:?}: {reason}")]
    Spec {
        /// The spec as written.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A schedule does not exist, or its definition or state does not allow the operation.
    #[error("schedule {name:?}: {reason}")]
    Schedule {
        /// The schedule's name.
        name: String,
        /// What is wrong.
        reason: String,
    },

    /// A statement failed.
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),

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
    /// True for failures that are worth retrying as they are: deadlocks, lock-wait timeouts and
    /// lost connections. The claim and finish paths retry these internally.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Db(e) => crate::db::is_transient(e),
            _ => false,
        }
    }
}
