//! Priority aging (schema 29): the queues' settings in `jobq_queue_aging`, and the statements of the
//! reaper's aging pass, which raise the priority of jobs that have waited (`job_queue.base_priority`
//! keeps what they were enqueued with). The walk over a queue's levels is in `crate::reaper::aging`;
//! what puts a job back at its base priority is part of the retry and snooze finishes (`db::finish`)
//! and of an operator's retry (`db::admin::jobs`).
//!
//! Every read of `job_queue` here is a range of the claim index `claim_order (ready_queue, priority,
//! run_at, id, kind)`: one dive for a queue's most urgent level, one per next level, and per level at
//! most [`ROWS_PER_LEVEL`] of its oldest due entries. So a pass reads entries in proportion to the
//! levels it visits, never to the backlog (`tests/it/aging.rs` counts them over 50,000 waiting jobs).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Connection, MySqlConnection, MySqlPool, Row};

use crate::db::{push_id_list, try_again};
use crate::error::Result;

/// The most jobs one pass raises per priority level of a queue: the oldest due ones, which are the
/// ones starvation is about (a claim reaches a level's newer jobs only after its older ones). A level
/// with more jobs due to age gives them their steps over the following passes, oldest first.
pub(crate) const ROWS_PER_LEVEL: u32 = 100;

/// The most priority levels one pass visits per queue. A queue using more levels than this has the
/// rest visited by the next passes (the walk resumes after the last level it visited), so that the
/// pass stays bounded however priorities are spread.
pub(crate) const LEVELS_PER_PASS: usize = 64;

/// The assignments that put a job back at the priority it was enqueued with (a no-op for a job never
/// aged), for the statements after which its wait starts over: a retry, a snooze, an operator's retry.
/// Right whether the server assigns left to right or all at once.
macro_rules! unaged {
    () => {
        "priority = COALESCE(base_priority, priority), base_priority = NULL"
    };
}
pub(crate) use unaged;

/// Tries of a level's transaction on deadlocks and lock-wait timeouts.
const TRIES: u32 = 4;

/// A queue's priority aging, as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueAging {
    /// The queue.
    pub queue: String,
    /// A waiting job gains one step of priority (its number goes down by one) per this long due.
    #[serde(rename = "every_secs", serialize_with = "crate::json::secs")]
    pub every: Duration,
    /// The most urgent priority aging may give a job; `None`: the most urgent priority among the
    /// queue's waiting jobs. Aging never takes a job past the queue's most urgent waiting level
    /// either way: an aged job joins the most urgent work, ahead of the newer jobs there, and never
    /// jumps ahead of it.
    #[serde(rename = "floor_priority")]
    pub floor: Option<i16>,
    /// When it was set.
    pub set_at: DateTime<Utc>,
    /// Who set it.
    pub set_by: String,
}

/// `every` as the column holds it (DECIMAL(9, 3) seconds), as exact text.
fn decimal_secs(every: Duration) -> String {
    let ms = every.as_millis();
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// Sets `queue`'s aging, replacing any it had.
pub(crate) async fn set(
    pool: &MySqlPool,
    queue: &str,
    every: Duration,
    floor: Option<i16>,
    by: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO jobq_queue_aging (queue, every_secs, floor_priority, set_by) VALUES (?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE every_secs = VALUES(every_secs), \
         floor_priority = VALUES(floor_priority), set_by = VALUES(set_by), set_at = NOW(6)",
    )
    .bind(queue)
    .bind(decimal_secs(every))
    .bind(floor)
    .bind(by)
    .execute(pool)
    .await?;
    Ok(())
}

/// Stops aging `queue`'s jobs; false when it had no aging. Jobs aged already keep their priority.
pub(crate) async fn remove(pool: &MySqlPool, queue: &str) -> Result<bool> {
    let r = sqlx::query("DELETE FROM jobq_queue_aging WHERE queue = ?")
        .bind(queue)
        .execute(pool)
        .await?;
    Ok(r.rows_affected() > 0)
}

/// The step in whole microseconds: a row written from SQL with a step below one millisecond (or,
/// on a server that ignores CHECK constraints, zero or less) reads as 0 and is skipped by the pass.
const SELECT_ALL: &str = "SELECT CAST(queue AS CHAR) AS queue, \
     CAST(GREATEST(every_secs, 0) * 1000000 AS UNSIGNED) AS every_us, floor_priority, set_at, \
     CAST(set_by AS CHAR) AS set_by FROM jobq_queue_aging ORDER BY queue";

/// A stored row, and its step in microseconds (0: unusable).
fn from_row(row: &sqlx::mysql::MySqlRow) -> std::result::Result<(QueueAging, u64), sqlx::Error> {
    let every_us: u64 = row.try_get("every_us")?;
    Ok((
        QueueAging {
            queue: row.try_get("queue")?,
            every: Duration::from_micros(every_us),
            floor: row.try_get("floor_priority")?,
            set_at: row.try_get("set_at")?,
            set_by: row.try_get("set_by")?,
        },
        every_us,
    ))
}

/// Every queue's aging, by queue.
pub(crate) async fn all(pool: &MySqlPool) -> Result<Vec<QueueAging>> {
    let rows = sqlx::query(SELECT_ALL).fetch_all(pool).await?;
    Ok(rows
        .iter()
        .map(from_row)
        .collect::<std::result::Result<Vec<_>, _>>()?
        .into_iter()
        .map(|(a, _)| a)
        .collect())
}

/// Every queue's aging, with its step in microseconds (0 for a row the pass cannot use), on the
/// pass's connection.
pub(crate) async fn all_on(conn: &mut MySqlConnection) -> Result<Vec<(QueueAging, u64)>> {
    let rows = sqlx::query(SELECT_ALL).fetch_all(&mut *conn).await?;
    Ok(rows
        .iter()
        .map(from_row)
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// The most urgent priority among `queue`'s waiting jobs (due or not), or `None` when none waits:
/// one dive into the claim index (MIN of the column after an equality is read at the range's start).
pub(crate) async fn top_level(conn: &mut MySqlConnection, queue: &str) -> Result<Option<i16>> {
    Ok(sqlx::query_scalar(
        "SELECT MIN(priority) FROM job_queue FORCE INDEX (claim_order) WHERE ready_queue = ?",
    )
    .bind(queue)
    .fetch_one(&mut *conn)
    .await?)
}

/// The next priority level of `queue`'s waiting jobs after `above`, or `None`: one dive, as
/// [`top_level`]. Walking the levels this way is a loose index scan whose cost does not depend on the
/// optimizer: MariaDB 10.11 did not plan `SELECT priority … WHERE ready_queue = ? GROUP BY priority` as
/// one (50,000 waiting jobs on five levels, after ANALYZE: Handler_read_next 50,000), where the five
/// dives of this walk read one key each.
pub(crate) async fn next_level(
    conn: &mut MySqlConnection,
    queue: &str,
    above: i16,
) -> Result<Option<i16>> {
    Ok(sqlx::query_scalar(
        "SELECT MIN(priority) FROM job_queue FORCE INDEX (claim_order) \
         WHERE ready_queue = ? AND priority > ?",
    )
    .bind(queue)
    .bind(above)
    .fetch_one(&mut *conn)
    .await?)
}

/// How one level of one queue is aged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LevelStep<'a> {
    pub queue: &'a str,
    pub level: i16,
    /// No job goes past this priority (smaller than `level`).
    pub floor: i16,
    pub every_us: u64,
}

/// The oldest due jobs of one level that have waited at least one step, in index order, locked
/// (skipping rows a claim holds: they are leaving the queue). The range ends at `run_at <= now -
/// step`, so it reads at most [`ROWS_PER_LEVEL`] entries past its start.
const PICK: &str = "SELECT id FROM job_queue FORCE INDEX (claim_order) \
     WHERE ready_queue = ? AND priority = ? AND run_at <= NOW(6) - INTERVAL ? MICROSECOND \
     ORDER BY run_at, id LIMIT ? FOR UPDATE SKIP LOCKED";

/// A job's aged priority is its base priority less one per whole step it has been due, never past
/// the floor. It is a function of the row and the clock, not a count of passes, so any number of
/// reapers may run the pass at once (they write the same value), a pass that came late catches up,
/// and an aged job waiting for its next step is left alone. The WHERE keeps only rows the SET lowers
/// (the connection counts rows matched, not changed, so it must), rechecked on the locked rows.
/// Each priority expression reads `COALESCE(base_priority, priority)`, so it holds whether the server
/// assigns left to right or all at once (MariaDB's SIMULTANEOUS_ASSIGNMENT).
const AGED: &str = "COALESCE(base_priority, priority) \
     - FLOOR(TIMESTAMPDIFF(MICROSECOND, run_at, NOW(6)) / ";

/// Raises the oldest due jobs of one level by the steps they have waited. Returns how many it raised.
pub(crate) async fn age_level(conn: &mut MySqlConnection, step: LevelStep<'_>) -> Result<u64> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match age_level_once(conn, step).await {
            Ok(n) => return Ok(n),
            Err(e) if try_again("aging", attempt, TRIES, &e).await => {}
            Err(e) => return Err(e.into()),
        }
    }
}

async fn age_level_once(
    conn: &mut MySqlConnection,
    step: LevelStep<'_>,
) -> std::result::Result<u64, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let ids: Vec<u64> = sqlx::query_scalar(PICK)
        .bind(step.queue)
        .bind(step.level)
        .bind(step.every_us)
        .bind(ROWS_PER_LEVEL)
        .fetch_all(&mut *tx)
        .await?;
    if ids.is_empty() {
        tx.rollback().await?;
        return Ok(0);
    }
    let raised = match raise(&mut tx, step, &ids).await {
        // A row whose payload the server refuses to change fails the whole UPDATE, pass after pass:
        // set aside as the claim sets it aside, and raise the rest.
        Err(e) if crate::db::claim::malformed::is_check_failure(&e) => {
            if crate::db::claim::malformed::set_aside_among(&mut tx, &ids)
                .await?
                .is_empty()
            {
                return Err(e);
            }
            raise(&mut tx, step, &ids).await?
        }
        raised => raised?,
    };
    tx.commit().await?;
    Ok(raised)
}

/// The UPDATE of [`age_level_once`]: raises those of `ids` (locked) that are still due at the level.
async fn raise(
    tx: &mut MySqlConnection,
    step: LevelStep<'_>,
    ids: &[u64],
) -> std::result::Result<u64, sqlx::Error> {
    let mut q = sqlx::QueryBuilder::new(
        "UPDATE job_queue FORCE INDEX (PRIMARY) SET \
         base_priority = COALESCE(base_priority, priority), priority = GREATEST(",
    );
    q.push_bind(step.floor)
        .push(format!(", {AGED}"))
        .push_bind(step.every_us)
        .push(")) WHERE id IN (");
    push_id_list(&mut q, ids);
    q.push(") AND ready_queue = ")
        .push_bind(step.queue)
        .push(" AND priority = ")
        .push_bind(step.level)
        .push(format!(" AND {AGED}"))
        .push_bind(step.every_us)
        .push(") < priority");
    Ok(q.build().execute(&mut *tx).await?.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_stored_as_exact_decimal_seconds() {
        assert_eq!(decimal_secs(Duration::from_millis(200)), "0.200");
        assert_eq!(decimal_secs(Duration::from_secs(300)), "300.000");
        assert_eq!(decimal_secs(Duration::from_millis(1_001)), "1.001");
    }
}
