//! A schedule and its runs as the database keeps them.

use chrono::{DateTime, Utc};

use super::spec::Spec;
use super::{Cause, Outcome, ScheduleDef, ScheduleState};
use crate::error::Result;
use crate::job::State;

/// A schedule as stored. Serializes flat: the definition's fields beside the row's.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScheduleRecord {
    /// Row id.
    pub id: u64,
    /// The definition.
    #[serde(flatten)]
    pub def: ScheduleDef,
    /// Phase of interval specs.
    pub anchor_at: DateTime<Utc>,
    /// Current state.
    pub state: ScheduleState,
    /// The next planned time, if any.
    pub next_run_at: Option<DateTime<Utc>>,
    /// Planned time of the latest run created.
    pub last_run_at: Option<DateTime<Utc>>,
    /// Failed runs in a row.
    pub consecutive_failures: u32,
    /// Runs created so far.
    pub total_runs: u64,
    /// Runs that ended dead so far.
    pub total_failures: u64,
    /// Planned times passed over without a job (overlap `skip`, misfires).
    pub skipped_runs: u64,
    /// Error of the latest failed run.
    pub last_error: Option<String>,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
}

impl ScheduleRecord {
    /// The parsed spec.
    pub fn spec(&self) -> Result<Spec> {
        Spec::parse(&self.def.spec, &self.def.time_zone)
    }
}

/// One run of a schedule: one planned time and the one job created for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRecord {
    /// Row id.
    pub id: u64,
    /// The schedule.
    pub schedule_id: u64,
    /// The planned time.
    pub planned_at: DateTime<Utc>,
    /// Why the run was made.
    pub cause: Cause,
    /// The job.
    pub job_id: Option<crate::job::JobId>,
    /// When the job was created.
    pub created_at: DateTime<Utc>,
    /// The job's state now (None if the job row is gone).
    pub job_state: Option<State>,
    /// When the job's last attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When the job ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// How the job ended, once the scheduler has seen it end; None before.
    pub outcome: Option<Outcome>,
    /// The job's last error.
    pub error: Option<String>,
}
