//! Paused queues (schema 11): one row in `jobq_queues` per paused queue; queues pinned to hosts
//! (schema 15): rows in `jobq_queue_hosts`. The claim and the idle probe read both themselves
//! ([`crate::statements::CLAIM_SELECT`], [`crate::db::claim`]), so nothing here has to reach the
//! workers.

use sqlx::MySqlPool;

use crate::error::Result;

/// Width of `paused_by` and `reason` (characters).
pub(crate) const NOTE_WIDTH: usize = 255;

/// A paused queue, as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct PausedQueue {
    /// The queue's name.
    pub name: String,
    /// When it was paused.
    pub paused_at: chrono::DateTime<chrono::Utc>,
    /// Who paused it (an OS user for the CLI, the dashboard's user, or what a program said).
    pub paused_by: String,
    /// Why, if they said.
    pub reason: Option<String>,
}

/// Pauses `queue`; false when it was paused already (the first pause's who and why are kept).
pub(crate) async fn pause(
    pool: &MySqlPool,
    queue: &str,
    by: &str,
    reason: Option<&str>,
) -> Result<bool> {
    // INSERT IGNORE skips only the duplicate key here: the values were checked before.
    let r =
        sqlx::query("INSERT IGNORE INTO jobq_queues (name, paused_by, reason) VALUES (?, ?, ?)")
            .bind(queue)
            .bind(by)
            .bind(reason)
            .execute(pool)
            .await?;
    Ok(r.rows_affected() == 1)
}

/// Resumes `queue`; false when it was not paused.
pub(crate) async fn resume(pool: &MySqlPool, queue: &str) -> Result<bool> {
    let r = sqlx::query("DELETE FROM jobq_queues WHERE name = ?")
        .bind(queue)
        .execute(pool)
        .await?;
    Ok(r.rows_affected() > 0)
}

/// Every paused queue, by name.
pub(crate) async fn paused(pool: &MySqlPool) -> Result<Vec<PausedQueue>> {
    Ok(sqlx::query_as(
        "SELECT CAST(name AS CHAR) AS name, paused_at, paused_by, reason FROM jobq_queues ORDER BY name",
    )
    .fetch_all(pool)
    .await?)
}

/// Whether `queue` has a job waiting (queued or to retry): one entry of the claim index. A pause of a
/// queue with none is allowed, and said.
pub(crate) async fn has_waiting(pool: &MySqlPool, queue: &str) -> Result<bool> {
    let any: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM job_queue FORCE INDEX (claim_order) WHERE ready_queue = ? LIMIT 1",
    )
    .bind(queue)
    .fetch_optional(pool)
    .await?;
    Ok(any.is_some())
}

/// A queue pinned to a host.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct QueuePin {
    /// The queue.
    pub queue: String,
    /// A host whose workers serve it.
    pub host: String,
    /// When it was pinned there.
    pub set_at: chrono::DateTime<chrono::Utc>,
    /// Who pinned it.
    pub set_by: String,
}

/// Pins `queue` to `host` (adds the host to the queue's hosts).
pub(crate) async fn pin(pool: &MySqlPool, queue: &str, host: &str, by: &str) -> Result<()> {
    sqlx::query("INSERT IGNORE INTO jobq_queue_hosts (queue, host, set_by) VALUES (?, ?, ?)")
        .bind(queue)
        .bind(host)
        .bind(by)
        .execute(pool)
        .await?;
    Ok(())
}

/// Unpins `queue` from `host`, or from every host; the rows removed.
pub(crate) async fn unpin(pool: &MySqlPool, queue: &str, host: Option<&str>) -> Result<u64> {
    let r = match host {
        Some(h) => {
            sqlx::query("DELETE FROM jobq_queue_hosts WHERE queue = ? AND host = ?")
                .bind(queue)
                .bind(h)
                .execute(pool)
                .await?
        }
        None => {
            sqlx::query("DELETE FROM jobq_queue_hosts WHERE queue = ?")
                .bind(queue)
                .execute(pool)
                .await?
        }
    };
    Ok(r.rows_affected())
}

const PINS: &str = "SELECT CAST(queue AS CHAR) AS queue, CAST(host AS CHAR) AS host, set_at, \
                    CAST(set_by AS CHAR) AS set_by FROM jobq_queue_hosts ORDER BY queue, host";

/// Every pin, by queue.
pub(crate) async fn pins(pool: &MySqlPool) -> Result<Vec<QueuePin>> {
    Ok(sqlx::query_as(PINS).fetch_all(pool).await?)
}
