//! Scheduler SQL: schedules (`jobq_schedules`, in `schedules.rs`), their runs (`jobq_schedule_runs`,
//! in `runs.rs`) and their change log (`jobq_schedule_log`, in `log.rs`, written in the transaction of
//! each change it records).
//!
//! The invariant kept in `runs.rs`: **each planned time of a schedule gets at most one job**, however many
//! schedulers run. `advance` moves a schedule's `next_run_at` only from the value its caller read
//! (`WHERE next_run_at = ?`), in the same transaction as the run rows and jobs for the planned times it
//! passes; a scheduler that lost the race changes nothing. The run row's `UNIQUE (schedule_id,
//! planned_at)` is the second guard, and also covers startup and manual runs, which do not move
//! `next_run_at`. A run's outcome is recorded once (`WHERE outcome IS NULL`), so failure counts are right
//! however many schedulers see the job end.

mod log;
mod runs;
mod schedules;

use chrono::{DateTime, Utc};
use sqlx::MySqlPool;

use crate::error::Result;

pub(crate) use log::{Logged, Note, of_schedule as log_of, write_logged as write_log};
pub(crate) use runs::{
    Advance, Fire, active_jobs, advance, ended_runs, fire_logged, fire_one, record_outcome, runs,
};
pub(crate) use schedules::{
    Reschedule, delete, due, get, insert, list, set_state, startup_schedules, update_definition,
};

/// Tries of each scheduler transaction on deadlocks and lost connections.
const TRIES: u32 = 8;

/// The database's clock: the time every scheduler agrees on.
pub(crate) async fn now(pool: &MySqlPool) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar("SELECT NOW(6)").fetch_one(pool).await?)
}
