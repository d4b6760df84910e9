//! The schedules' change log as the database keeps it (`jobq_schedule_log`, schema 10): who changed a
//! schedule, how and why. CockroachDB's scheduled jobs keep who paused a schedule and why; an operator
//! who finds a schedule paused at 3 a.m. should not have to guess.

use chrono::{DateTime, Utc};

string_enum! {
    /// What was done to a schedule.
    LogAction ("schedule log action") {
        /// Created.
        Create = "create",
        /// Its definition changed.
        Update = "update",
        /// Paused, by an operator or by the scheduler (`on_error = "pause"` after a failed run).
        Pause = "pause",
        /// Resumed.
        Resume = "resume",
        /// A run made now, outside its times.
        RunNow = "run-now",
        /// Its jobs cancelled.
        Abort = "abort",
        /// Dropped, with its run history (its log stays).
        Drop = "drop",
        /// Broken by the scheduler after `broken_after` failed runs in a row.
        Broken = "broken",
    }
}

/// The actor of changes the scheduler makes itself (broken after failures, paused by `on_error`).
pub const SCHEDULER_ACTOR: &str = "scheduler";

/// The actor of library calls that name none (see [`crate::Schedules::by`]).
pub const LIBRARY_ACTOR: &str = "library";

/// One change of a schedule.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScheduleLogEntry {
    /// Row id (increasing: the order the changes were made in).
    pub id: u64,
    /// When, by the database clock.
    pub at: DateTime<Utc>,
    /// The schedule's name when it was changed.
    pub schedule: String,
    /// The schedule's row id: tells a dropped schedule from a later one of the same name.
    pub schedule_id: u64,
    /// What was done.
    pub action: LogAction,
    /// Who: the OS user and host for the CLI, the signed-in user for the dashboard, the caller's name
    /// (else "library") for library calls, "scheduler" for the scheduler's own changes.
    pub actor: String,
    /// Why, when the actor said (`--reason`), or what made the scheduler act.
    pub reason: Option<String>,
}
