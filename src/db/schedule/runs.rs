//! Runs (`jobq_schedule_runs`) and the jobs they make: the statements that keep "each planned time of a
//! schedule gets at most one job" (see [`super`]), and a run's outcome, recorded once.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySqlConnection, MySqlPool, Row};

use super::TRIES;
use super::log::{Logged, Note};
use crate::db::retry_transient;
use crate::db::row::{opt_parsed, opt_text, parsed, text};
use crate::errno::is_duplicate_entry;
use crate::error::Result;
use crate::job::JobId;
use crate::schedule::{
    Cause, LogAction, OnError, Outcome, RunRecord, SCHEDULER_ACTOR, ScheduleDef, ScheduleState,
};

impl<'r> sqlx::FromRow<'r, MySqlRow> for RunRecord {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            schedule_id: row.try_get("schedule_id")?,
            planned_at: row.try_get("planned_at")?,
            cause: parsed(row, "cause")?,
            job_id: row.try_get("job_id")?,
            created_at: row.try_get("created_at")?,
            job_state: opt_parsed(row, "job_state")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            outcome: opt_parsed(row, "outcome")?,
            error: opt_text(row, "error")?,
        })
    }
}

/// One planned time to turn into a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fire {
    /// The planned time (the run's identity).
    pub(crate) planned_at: DateTime<Utc>,
    /// Why.
    pub(crate) cause: Cause,
    /// When the job becomes due: the planned time plus jitter.
    pub(crate) run_at: DateTime<Utc>,
}

/// A tick's change to one due schedule.
#[derive(Debug, Clone)]
pub(crate) struct Advance<'a> {
    pub(crate) id: u64,
    /// The next_run_at the tick read; the update applies only if the row still has it.
    pub(crate) expected_next: DateTime<Utc>,
    pub(crate) next_run_at: Option<DateTime<Utc>>,
    pub(crate) state: ScheduleState,
    pub(crate) fire: &'a [Fire],
    pub(crate) skipped: u64,
}

/// Moves a due schedule on and creates the jobs of `fire`, in one transaction. Returns the number of jobs
/// created, or None when another scheduler had already moved the schedule (nothing was written).
pub(crate) async fn advance(pool: &MySqlPool, a: &Advance<'_>) -> Result<Option<u64>> {
    retry_transient("advance schedule", TRIES, || async {
        let mut tx = pool.begin().await?;
        // The guard. It also locks the schedule row, so a competing scheduler's identical UPDATE waits
        // for this transaction and then, re-reading the committed row (READ COMMITTED), matches nothing.
        let moved = sqlx::query(
            "UPDATE jobq_schedules SET next_run_at = ?, state = ?, skipped_runs = skipped_runs + ? \
             WHERE id = ? AND state = 'enabled' AND next_run_at = ?",
        )
        .bind(a.next_run_at)
        .bind(a.state.as_str())
        .bind(a.skipped)
        .bind(a.id)
        .bind(a.expected_next)
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let mut created = Vec::new();
        for f in a.fire {
            if insert_run(&mut tx, a.id, f).await?.is_some() {
                created.push((f.cause, f.planned_at));
            }
        }
        tx.commit().await?;
        // Counted once committed: a transaction retried after a deadlock is counted once.
        let now = chrono::Utc::now();
        for (cause, planned_at) in &created {
            crate::telemetry::schedule_job(cause.as_str());
            crate::telemetry::schedule_lateness((now - *planned_at).to_std().unwrap_or_default());
        }
        Ok(Some(created.len() as u64))
    })
    .await
}

/// Creates one run and its job outside the schedule's planned times (startup and manual runs): the
/// schedule's next run is left alone. Returns the job id, or None if this planned time already has a run.
pub(crate) async fn fire_one(
    pool: &MySqlPool,
    schedule_id: u64,
    fire: &Fire,
) -> Result<Option<JobId>> {
    fire_logged(pool, schedule_id, fire, None).await
}

/// [`fire_one`], and with `logged` the change log's row for it, in the same transaction (an operator's
/// run-now; a scheduler's startup run is not logged).
pub(crate) async fn fire_logged(
    pool: &MySqlPool,
    schedule_id: u64,
    fire: &Fire,
    logged: Option<Logged<'_>>,
) -> Result<Option<JobId>> {
    retry_transient("create schedule run", TRIES, || async {
        let mut tx = pool.begin().await?;
        let job = insert_run(&mut tx, schedule_id, fire).await?;
        if let (Some(_), Some(l)) = (job, logged) {
            super::log::write_logged(&mut tx, schedule_id, &l).await?;
        }
        tx.commit().await?;
        if job.is_some() {
            crate::telemetry::schedule_job(fire.cause.as_str());
        }
        Ok(job)
    })
    .await
}

/// Inserts the run row for `fire` and, if it is new, its job (copying kind, payload, queue, priority and
/// limits from the schedule row), and counts it on the schedule. Returns the job id, or None when the
/// run row already existed.
///
/// A duplicate is recognised by its error (`ER_DUP_ENTRY`), which rolls back only that statement, not the
/// transaction. Not by row counts: sqlx connects with CLIENT_FOUND_ROWS, so `ON DUPLICATE KEY UPDATE
/// id = id` reports 1 row for a duplicate too; and not with INSERT IGNORE, which would also turn other
/// errors into warnings.
async fn insert_run(
    conn: &mut MySqlConnection,
    schedule_id: u64,
    fire: &Fire,
) -> Result<Option<JobId>, sqlx::Error> {
    let run = sqlx::query(
        "INSERT INTO jobq_schedule_runs (schedule_id, planned_at, cause) VALUES (?, ?, ?)",
    )
    .bind(schedule_id)
    .bind(fire.planned_at)
    .bind(fire.cause.as_str())
    .execute(&mut *conn)
    .await;
    let run_id = match run {
        Ok(r) => r.last_insert_id(),
        Err(e) if is_duplicate_entry(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let job = sqlx::query(
        "INSERT INTO job_queue (kind, payload, queue, priority, run_at, max_attempts, timeout_secs) \
         SELECT kind, payload, queue, priority, ?, \
                COALESCE(max_attempts, IF(on_error = 'retry', ?, 1)), timeout_secs \
         FROM jobq_schedules WHERE id = ?",
    )
    .bind(fire.run_at)
    .bind(ScheduleDef::DEFAULT_RETRY_ATTEMPTS)
    .bind(schedule_id)
    .execute(&mut *conn)
    .await?;
    if job.rows_affected() != 1 {
        // The schedule row is gone (dropped meanwhile): the transaction's run row is an orphan; the
        // caller's commit keeps nothing useful, so fail this run instead.
        return Err(sqlx::Error::RowNotFound);
    }
    let job_id = JobId(job.last_insert_id());
    sqlx::query("UPDATE jobq_schedule_runs SET job_id = ? WHERE id = ?")
        .bind(job_id)
        .bind(run_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE jobq_schedules SET total_runs = total_runs + 1, \
         last_run_at = GREATEST(COALESCE(last_run_at, ?), ?) WHERE id = ?",
    )
    .bind(fire.planned_at)
    .bind(fire.planned_at)
    .bind(schedule_id)
    .execute(&mut *conn)
    .await?;
    Ok(Some(job_id))
}

/// Jobs of a schedule's runs that have not ended (queued, retry or running).
pub(crate) async fn active_jobs(pool: &MySqlPool, schedule_id: u64) -> Result<Vec<JobId>> {
    Ok(sqlx::query_scalar(
        "SELECT j.id FROM jobq_schedule_runs r JOIN job_queue j ON j.id = r.job_id \
         WHERE r.outcome IS NULL AND r.schedule_id = ? AND j.state IN ('queued', 'retry', 'running') \
         ORDER BY j.id",
    )
    .bind(schedule_id)
    .fetch_all(pool)
    .await?)
}

/// A run whose job has ended (or vanished) and whose outcome is not recorded yet.
#[derive(Debug, Clone)]
pub(crate) struct EndedRun {
    pub(crate) run_id: u64,
    pub(crate) schedule_id: u64,
    pub(crate) outcome: Outcome,
    pub(crate) error: Option<String>,
    pub(crate) started_at: Option<DateTime<Utc>>,
    pub(crate) finished_at: Option<DateTime<Utc>>,
}

/// Runs whose jobs ended since the last look, oldest first. Open runs are few (those whose jobs are
/// still waiting or running), and `open_runs (outcome, ...)` finds them without reading history.
pub(crate) async fn ended_runs(pool: &MySqlPool, limit: u32) -> Result<Vec<EndedRun>> {
    let rows = sqlx::query(
        "SELECT r.id, r.schedule_id, j.state, j.last_error, j.started_at, j.finished_at \
         FROM jobq_schedule_runs r LEFT JOIN job_queue j ON j.id = r.job_id \
         WHERE r.outcome IS NULL AND r.job_id IS NOT NULL \
           AND (j.id IS NULL OR j.state IN ('done', 'dead', 'cancelled')) \
         ORDER BY r.id LIMIT ?",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    let mut ended = Vec::with_capacity(rows.len());
    for row in &rows {
        // `state` is NULL only when the job row is gone (the column is NOT NULL). The WHERE clause reads
        // only ended or vanished jobs, so every row has an outcome.
        let Some(outcome) = Outcome::of_job(opt_parsed(row, "state")?) else {
            continue;
        };
        ended.push(EndedRun {
            run_id: row.try_get("id")?,
            schedule_id: row.try_get("schedule_id")?,
            outcome,
            error: opt_text(row, "last_error")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
        });
    }
    Ok(ended)
}

/// Records a run's outcome once, and applies it to its schedule through `policy` (state and failure
/// count in, state and failure count out). Returns the schedule's state before and after, or None when
/// another scheduler recorded the outcome first.
pub(crate) async fn record_outcome<P>(
    pool: &MySqlPool,
    run: &EndedRun,
    policy: P,
) -> Result<Option<(ScheduleState, ScheduleState)>>
where
    P: Fn(ScheduleState, u32, OnError, u32) -> (ScheduleState, u32),
{
    let policy = &policy;
    retry_transient("record run outcome", TRIES, || async move {
        let mut tx = pool.begin().await?;
        let marked = sqlx::query(
            "UPDATE jobq_schedule_runs SET outcome = ?, started_at = ?, finished_at = ?, error = ? \
             WHERE id = ? AND outcome IS NULL",
        )
        .bind(run.outcome.as_str())
        .bind(run.started_at)
        .bind(run.finished_at)
        .bind(run.error.as_deref().map(crate::db::finish::truncate_error))
        .bind(run.run_id)
        .execute(&mut *tx)
        .await?;
        if marked.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT name, state, consecutive_failures, on_error, broken_after FROM jobq_schedules \
             WHERE id = ? FOR UPDATE",
        )
        .bind(run.schedule_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.commit().await?;
            return Ok(None);
        };
        let before: ScheduleState = parsed(&row, "state")?;
        let on_error: OnError = parsed(&row, "on_error")?;
        let failures: u32 = row.try_get("consecutive_failures")?;
        let broken_after: u32 = row.try_get("broken_after")?;
        let (after, failures) = policy(before, failures, on_error, broken_after);
        let failed = run.outcome == Outcome::Failed;
        sqlx::query(
            "UPDATE jobq_schedules SET state = ?, consecutive_failures = ?, \
             total_failures = total_failures + ?, last_error = IF(?, ?, last_error) WHERE id = ?",
        )
        .bind(after.as_str())
        .bind(failures)
        .bind(u32::from(failed))
        .bind(failed)
        .bind(run.error.as_deref().map(crate::db::finish::truncate_error))
        .bind(run.schedule_id)
        .execute(&mut *tx)
        .await?;
        if let Some((action, reason)) = policy_change(run, before, after, failures, broken_after) {
            let name = text(&row, "name")?;
            let note = Note {
                actor: SCHEDULER_ACTOR,
                reason: Some(&reason),
            };
            super::log::write(&mut tx, run.schedule_id, &name, action, note).await?;
        }
        tx.commit().await?;
        Ok(Some((before, after)))
    })
    .await
}

/// The change log's entry for a state the scheduler's policy moved a schedule to after a run: broken
/// after too many failures, or paused by `on_error = "pause"`; None for every other outcome.
fn policy_change(
    run: &EndedRun,
    before: ScheduleState,
    after: ScheduleState,
    failures: u32,
    broken_after: u32,
) -> Option<(LogAction, String)> {
    if before == after {
        return None;
    }
    let error = run.error.as_deref().unwrap_or("no error recorded");
    let error = crate::db::finish::truncate_error(error);
    match after {
        ScheduleState::Broken => Some((
            LogAction::Broken,
            format!(
                "{failures} failed runs in a row (broken_after = {broken_after}); last error: {error}"
            ),
        )),
        ScheduleState::Paused => Some((
            LogAction::Pause,
            format!("a run failed and on_error is pause; error: {error}"),
        )),
        _ => None,
    }
}

/// A schedule's runs, newest planned time first, with their jobs' current state.
pub(crate) async fn runs(pool: &MySqlPool, schedule_id: u64, limit: u32) -> Result<Vec<RunRecord>> {
    Ok(sqlx::query_as(
        "SELECT r.id, r.schedule_id, r.planned_at, r.cause, r.job_id, r.created_at, j.state AS job_state, \
         COALESCE(r.started_at, j.started_at) AS started_at, \
         COALESCE(r.finished_at, j.finished_at) AS finished_at, r.outcome, \
         COALESCE(r.error, j.last_error) AS error \
         FROM jobq_schedule_runs r LEFT JOIN job_queue j ON j.id = r.job_id \
         WHERE r.schedule_id = ? ORDER BY r.planned_at DESC, r.id DESC LIMIT ?",
    )
    .bind(schedule_id)
    .bind(limit.max(1))
    .fetch_all(pool)
    .await?)
}
