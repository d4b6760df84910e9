//! Operator queries: listing, inspecting, retrying and cancelling jobs, and queue statistics. One file
//! per reader: [`jobs`] for what is done to jobs, [`dashboard`] for the bounded figures read on every
//! refresh, [`stats`] for `jobq stats` and the unserved-kinds check.

mod dashboard;
mod holds;
mod jobs;
mod stats;

pub use dashboard::{MinuteCount, QueueSummary, StateCount};
pub(crate) use dashboard::{
    finished_by_minute, history_length, oldest_running_secs, per_minute, queue_summaries,
    schedules_by_state, state_counts,
};
pub(crate) use holds::{Facts as HoldFacts, held};
pub use holds::{HeldGroup, Hold};
pub use jobs::{CancelOutcome, JobFilter};
pub(crate) use jobs::{
    cancel_job, delete_job, get_job, list_jobs, matching_ids, retry_job, run_job_now,
};
pub use stats::{KindLag, ProcessRow, QueueCount, QueueLag, RunningCount, Stats, Unserved};
pub(crate) use stats::{due_by_kind, lag, processes, running_counts, stats, unserved};
