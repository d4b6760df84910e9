//! What the CLI, the dashboard and the gauges read about jobs that wait: one job's edges both ways,
//! and the jobs that have waited too long.

use sqlx::MySqlPool;

use crate::error::Result;
use crate::job::State;

/// A dependency of a job or a job that depends on it, as `jobq jobs show` and the dashboard list them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Link {
    /// The other job.
    pub id: crate::id::JobId,
    /// Its state; `None` when no such job exists (it was deleted).
    pub state: Option<State>,
    /// How the waiting job waits for the other: `done` (runs once it is done), `ended` (once it
    /// has ended in any way: a batch's callback), or, for the job before it with the same order key,
    /// `next` (once it has ended in any way) or `halt` (once it is done or cancelled).
    pub until: String,
}

/// A job's place among jobs that wait for other jobs: the jobs it waits for (pending edges only: a job
/// that no longer waits has none), and the jobs waiting for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Dependencies {
    /// The jobs this one waits for, by id.
    pub waits_for: Vec<Link>,
    /// The jobs that wait for this one, by id.
    pub dependents: Vec<Link>,
}

/// The pending edges from and to job `id`, with the other job's state. Two primary-key and index ranges.
pub(crate) async fn of_job(pool: &MySqlPool, id: u64) -> Result<Dependencies> {
    let read = |sql: &'static str| async move {
        let rows: Vec<(u64, String, Option<String>)> =
            sqlx::query_as(sql).bind(id).fetch_all(pool).await?;
        rows.into_iter()
            .map(|(other, until, state)| {
                Ok(Link {
                    id: crate::id::JobId(other),
                    state: state.map(|s| s.parse()).transpose()?,
                    until,
                })
            })
            .collect::<Result<Vec<Link>>>()
    };
    let (waits_for, dependents) = tokio::try_join!(
        read(
            "SELECT d.after_id, CAST(d.until AS CHAR), CAST(j.state AS CHAR) FROM jobq_job_deps d \
             LEFT JOIN job_queue j ON j.id = d.after_id WHERE d.job_id = ? ORDER BY d.after_id"
        ),
        read(
            "SELECT d.job_id, CAST(d.until AS CHAR), CAST(j.state AS CHAR) \
             FROM jobq_job_deps d FORCE INDEX (after_id) \
             LEFT JOIN job_queue j ON j.id = d.job_id WHERE d.after_id = ? ORDER BY d.job_id"
        ),
    )?;
    Ok(Dependencies {
        waits_for,
        dependents,
    })
}

/// Jobs that have waited for other jobs longer than a threshold: a dependency that never ends (a job
/// stuck in retries, a queue nobody serves) holds its dependents back in silence otherwise.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LongWaiting {
    /// The threshold, in seconds.
    pub over_secs: f64,
    /// Jobs waiting for longer than that.
    pub count: i64,
    /// How long the longest-waiting job has waited, in seconds (None when no job waits at all).
    pub oldest_secs: Option<f64>,
}

/// Waiting jobs created more than `over` ago, and the oldest waiting job's wait. Reads the waiting
/// stretch of the `rare_state` index and those rows.
pub(crate) async fn long_waiting(
    pool: &MySqlPool,
    over: std::time::Duration,
) -> Result<LongWaiting> {
    let over_us = over.as_micros().min(i64::MAX as u128) as i64;
    let (count, oldest_us): (i64, Option<i64>) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(created_at < NOW(6) - INTERVAL ? MICROSECOND), 0) AS SIGNED), \
         TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) \
         FROM job_queue FORCE INDEX (rare_state) WHERE rare_state = 'waiting'",
    )
    .bind(over_us)
    .fetch_one(pool)
    .await?;
    Ok(LongWaiting {
        over_secs: over.as_secs_f64(),
        count,
        oldest_secs: oldest_us.map(|us| us.max(0) as f64 / 1e6),
    })
}
