//! Scheduler SQL: schedules (`jobq_schedules`) and their runs (`jobq_schedule_runs`).
//!
//! The invariant this file keeps: **each planned time of a schedule gets at most one job**, however many
//! schedulers run. `advance` moves a schedule's `next_run_at` only from the value its caller read
//! (`WHERE next_run_at = ?`), in the same transaction as the run rows and jobs for the planned times it
//! passes; a scheduler that lost the race changes nothing. The run row's `UNIQUE (schedule_id,
//! planned_at)` is the second guard, and also covers startup and manual runs, which do not move
//! `next_run_at`. A run's outcome is recorded once (`WHERE outcome IS NULL`), so failure counts are right
//! however many schedulers see the job end.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder, Row};

use crate::db::row::{opt_text, text};
use crate::db::{error_number, retry_transient};
use crate::error::{Error, Result};
use crate::scheduler::def::{
    Misfire, OnError, Overlap, RunRecord, ScheduleDef, ScheduleRecord, ScheduleState,
};
use crate::scheduler::policy::{Cause, Outcome};

/// Tries of each scheduler transaction on deadlocks and lost connections.
const TRIES: u32 = 8;

/// `ER_DUP_ENTRY`.
const DUP_ENTRY: u16 = 1062;

const SCHEDULE_COLUMNS: &str = "id, name, kind, payload, queue, priority, max_attempts, timeout_secs, \
     spec, time_zone, anchor_at, start_at, end_at, at_startup, overlap, on_error, misfire, jitter_ms, \
     broken_after, state, next_run_at, last_run_at, consecutive_failures, total_runs, total_failures, \
     skipped_runs, last_error, created_at, updated_at";

fn parse_col<T: std::str::FromStr<Err = Error>>(
    row: &MySqlRow,
    col: &str,
) -> Result<T, sqlx::Error> {
    text(row, col)?
        .parse()
        .map_err(|e: Error| sqlx::Error::ColumnDecode {
            index: col.into(),
            source: Box::new(e),
        })
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for ScheduleRecord {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        let jitter_ms: u32 = row.try_get("jitter_ms")?;
        let timeout_secs: Option<u32> = row.try_get("timeout_secs")?;
        let def = ScheduleDef {
            name: text(row, "name")?,
            kind: text(row, "kind")?,
            spec: text(row, "spec")?,
            time_zone: text(row, "time_zone")?,
            payload: text(row, "payload")?,
            queue: text(row, "queue")?,
            priority: row.try_get("priority")?,
            max_attempts: row.try_get("max_attempts")?,
            timeout: timeout_secs.map(|s| std::time::Duration::from_secs(s.into())),
            start_at: row.try_get("start_at")?,
            end_at: row.try_get("end_at")?,
            at_startup: row.try_get("at_startup")?,
            overlap: parse_col::<Overlap>(row, "overlap")?,
            on_error: parse_col::<OnError>(row, "on_error")?,
            misfire: parse_col::<Misfire>(row, "misfire")?,
            jitter: std::time::Duration::from_millis(jitter_ms.into()),
            broken_after: row.try_get("broken_after")?,
            paused: false,
        };
        let state: ScheduleState = parse_col(row, "state")?;
        Ok(Self {
            id: row.try_get("id")?,
            def: ScheduleDef {
                paused: state == ScheduleState::Paused,
                ..def
            },
            anchor_at: row.try_get("anchor_at")?,
            state,
            next_run_at: row.try_get("next_run_at")?,
            last_run_at: row.try_get("last_run_at")?,
            consecutive_failures: row.try_get("consecutive_failures")?,
            total_runs: row.try_get("total_runs")?,
            total_failures: row.try_get("total_failures")?,
            skipped_runs: row.try_get("skipped_runs")?,
            last_error: opt_text(row, "last_error")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
        })
    }
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for RunRecord {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            schedule_id: row.try_get("schedule_id")?,
            planned_at: row.try_get("planned_at")?,
            cause: text(row, "cause")?,
            job_id: row.try_get("job_id")?,
            created_at: row.try_get("created_at")?,
            job_state: opt_text(row, "job_state")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            outcome: opt_text(row, "outcome")?,
            error: opt_text(row, "error")?,
        })
    }
}

/// The database's clock: the time every scheduler agrees on.
pub(crate) async fn now(pool: &MySqlPool) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar("SELECT NOW(6)").fetch_one(pool).await?)
}

fn timeout_secs(def: &ScheduleDef) -> Option<u32> {
    def.timeout.map(crate::job::timeout_secs)
}

fn jitter_ms(def: &ScheduleDef) -> u32 {
    def.jitter.as_millis().min(u128::from(u32::MAX)) as u32
}

/// Inserts a schedule. A taken name is an [`Error::Schedule`] that says so.
pub(crate) async fn insert(
    pool: &MySqlPool,
    def: &ScheduleDef,
    anchor_at: DateTime<Utc>,
    next_run_at: Option<DateTime<Utc>>,
    state: ScheduleState,
) -> Result<u64> {
    let r = sqlx::query(
        "INSERT INTO jobq_schedules (name, kind, payload, queue, priority, max_attempts, timeout_secs, \
         spec, time_zone, anchor_at, start_at, end_at, at_startup, overlap, on_error, misfire, jitter_ms, \
         broken_after, state, next_run_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&def.name)
    .bind(&def.kind)
    .bind(&def.payload)
    .bind(&def.queue)
    .bind(def.priority)
    .bind(def.max_attempts)
    .bind(timeout_secs(def))
    .bind(def.spec.trim())
    .bind(def.time_zone.trim())
    .bind(anchor_at)
    .bind(def.start_at)
    .bind(def.end_at)
    .bind(def.at_startup)
    .bind(def.overlap.as_str())
    .bind(def.on_error.as_str())
    .bind(def.misfire.as_str())
    .bind(jitter_ms(def))
    .bind(def.broken_after)
    .bind(state.as_str())
    .bind(next_run_at)
    .execute(pool)
    .await;
    match r {
        Ok(done) => Ok(done.last_insert_id()),
        Err(e) if error_number(&e) == Some(DUP_ENTRY) => Err(Error::Schedule {
            name: def.name.clone(),
            reason: "already exists; change it with `jobq schedule update`".into(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// A new spec's timing, written together with a definition change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reschedule {
    pub(crate) anchor_at: DateTime<Utc>,
    pub(crate) next_run_at: Option<DateTime<Utc>>,
    pub(crate) state: ScheduleState,
}

/// Rewrites a schedule's definition; with `reschedule`, also its anchor, next run and state. Without it
/// the schedule keeps its state and next run (an unchanged spec from a config sync).
pub(crate) async fn update_definition(
    pool: &MySqlPool,
    id: u64,
    def: &ScheduleDef,
    reschedule: Option<Reschedule>,
) -> Result<()> {
    let mut q = QueryBuilder::<MySql>::new("UPDATE jobq_schedules SET kind = ");
    q.push_bind(&def.kind)
        .push(", payload = ")
        .push_bind(&def.payload)
        .push(", queue = ")
        .push_bind(&def.queue)
        .push(", priority = ")
        .push_bind(def.priority)
        .push(", max_attempts = ")
        .push_bind(def.max_attempts)
        .push(", timeout_secs = ")
        .push_bind(timeout_secs(def))
        .push(", spec = ")
        .push_bind(def.spec.trim())
        .push(", time_zone = ")
        .push_bind(def.time_zone.trim())
        .push(", start_at = ")
        .push_bind(def.start_at)
        .push(", end_at = ")
        .push_bind(def.end_at)
        .push(", at_startup = ")
        .push_bind(def.at_startup)
        .push(", overlap = ")
        .push_bind(def.overlap.as_str())
        .push(", on_error = ")
        .push_bind(def.on_error.as_str())
        .push(", misfire = ")
        .push_bind(def.misfire.as_str())
        .push(", jitter_ms = ")
        .push_bind(jitter_ms(def))
        .push(", broken_after = ")
        .push_bind(def.broken_after);
    if let Some(r) = reschedule {
        q.push(", anchor_at = ")
            .push_bind(r.anchor_at)
            .push(", next_run_at = ")
            .push_bind(r.next_run_at)
            .push(", state = ")
            .push_bind(r.state.as_str());
    }
    q.push(" WHERE id = ").push_bind(id);
    q.build().execute(pool).await?;
    Ok(())
}

/// One schedule by name.
pub(crate) async fn get(pool: &MySqlPool, name: &str) -> Result<Option<ScheduleRecord>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM jobq_schedules WHERE name = ?"
    ))
    .bind(name)
    .fetch_optional(pool)
    .await?)
}

/// Every schedule, by name.
pub(crate) async fn list(pool: &MySqlPool) -> Result<Vec<ScheduleRecord>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM jobq_schedules ORDER BY name"
    ))
    .fetch_all(pool)
    .await?)
}

/// Enabled schedules whose next planned time has come, earliest first.
pub(crate) async fn due(
    pool: &MySqlPool,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<ScheduleRecord>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM jobq_schedules \
         WHERE state = 'enabled' AND next_run_at <= ? ORDER BY next_run_at, id LIMIT ?"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Enabled schedules that also run when a scheduler starts.
pub(crate) async fn startup_schedules(pool: &MySqlPool) -> Result<Vec<ScheduleRecord>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM jobq_schedules WHERE state = 'enabled' AND at_startup ORDER BY id"
    ))
    .fetch_all(pool)
    .await?)
}

/// Changes a schedule's state if it is in one of `from`. `next_run_at`, when given, is written too;
/// `reset_failures` zeroes the failure count. Returns false when the state was not one of `from`.
pub(crate) async fn set_state(
    pool: &MySqlPool,
    id: u64,
    from: &[ScheduleState],
    to: ScheduleState,
    next_run_at: Option<Option<DateTime<Utc>>>,
    reset_failures: bool,
) -> Result<bool> {
    let mut q = QueryBuilder::<MySql>::new("UPDATE jobq_schedules SET state = ");
    q.push_bind(to.as_str());
    if let Some(next) = next_run_at {
        q.push(", next_run_at = ").push_bind(next);
    }
    if reset_failures {
        q.push(", consecutive_failures = 0");
    }
    q.push(" WHERE id = ").push_bind(id).push(" AND state IN (");
    let mut sep = q.separated(", ");
    for s in from {
        sep.push_bind(s.as_str());
    }
    q.push(")");
    Ok(q.build().execute(pool).await?.rows_affected() == 1)
}

/// Deletes a schedule and its run history. Jobs it created stay in the queue.
pub(crate) async fn delete(pool: &MySqlPool, id: u64) -> Result<()> {
    retry_transient("drop schedule", TRIES, || async {
        let mut tx = pool.begin().await?;
        sqlx::query("DELETE FROM jobq_schedule_runs WHERE schedule_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM jobq_schedules WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    })
    .await
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
        let mut created = 0;
        for f in a.fire {
            if insert_run(&mut tx, a.id, f).await?.is_some() {
                created += 1;
            }
        }
        tx.commit().await?;
        Ok(Some(created))
    })
    .await
}

/// Creates one run and its job outside the schedule's planned times (startup and manual runs): the
/// schedule's next run is left alone. Returns the job id, or None if this planned time already has a run.
pub(crate) async fn fire_one(
    pool: &MySqlPool,
    schedule_id: u64,
    fire: &Fire,
) -> Result<Option<u64>> {
    retry_transient("create schedule run", TRIES, || async {
        let mut tx = pool.begin().await?;
        let job = insert_run(&mut tx, schedule_id, fire).await?;
        tx.commit().await?;
        Ok(job)
    })
    .await
}

/// Inserts the run row for `fire` and, if it is new, its job (copying kind, payload, queue, priority and
/// limits from the schedule row), and counts it on the schedule. Returns the job id, or None when the
/// run row already existed.
///
/// A duplicate is recognised by its error (1062), which rolls back only that statement, not the
/// transaction. Not by row counts: sqlx connects with CLIENT_FOUND_ROWS, so `ON DUPLICATE KEY UPDATE
/// id = id` reports 1 row for a duplicate too; and not with INSERT IGNORE, which would also turn other
/// errors into warnings.
async fn insert_run(
    conn: &mut MySqlConnection,
    schedule_id: u64,
    fire: &Fire,
) -> Result<Option<u64>, sqlx::Error> {
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
        Err(e) if error_number(&e) == Some(DUP_ENTRY) => return Ok(None),
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
    let job_id = job.last_insert_id();
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
pub(crate) async fn active_jobs(pool: &MySqlPool, schedule_id: u64) -> Result<Vec<u64>> {
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
        "SELECT r.id, r.schedule_id, j.id AS job, j.state, j.last_error, j.started_at, j.finished_at \
         FROM jobq_schedule_runs r LEFT JOIN job_queue j ON j.id = r.job_id \
         WHERE r.outcome IS NULL AND r.job_id IS NOT NULL \
           AND (j.id IS NULL OR j.state IN ('done', 'dead', 'cancelled')) \
         ORDER BY r.id LIMIT ?",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            let job: Option<u64> = row.try_get("job")?;
            let outcome = match (job, opt_text(row, "state")?.as_deref()) {
                (None, _) => Outcome::Missing,
                (_, Some("done")) => Outcome::Done,
                (_, Some("dead")) => Outcome::Failed,
                _ => Outcome::Cancelled,
            };
            Ok(EndedRun {
                run_id: row.try_get("id")?,
                schedule_id: row.try_get("schedule_id")?,
                outcome,
                error: opt_text(row, "last_error")?,
                started_at: row.try_get("started_at")?,
                finished_at: row.try_get("finished_at")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(Error::from)
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
            "SELECT state, consecutive_failures, on_error, broken_after FROM jobq_schedules \
             WHERE id = ? FOR UPDATE",
        )
        .bind(run.schedule_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.commit().await?;
            return Ok(None);
        };
        let before: ScheduleState = parse_col(&row, "state")?;
        let on_error: OnError = parse_col(&row, "on_error")?;
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
        tx.commit().await?;
        Ok(Some((before, after)))
    })
    .await
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
