//! Done jobs per minute (schema 40): what worker processes add with their heartbeats, what the
//! dashboard's chart of the last hour reads, and what reapers remove once it is old. Counting done rows
//! by `finished_at` would need an index that every finish moves an entry in; these counts cost one
//! statement per process per heartbeat instead.

use sqlx::{MySqlExecutor, MySqlPool};

use crate::error::Result;

/// How many minutes of counts are kept: the chart shows sixty, and a reaper that passes rarely still
/// finds the hour whole.
pub(crate) const KEPT_MINUTES: i64 = 120;

/// Adds `done` jobs to `holder`'s count for the current minute (database clock). Only the process
/// named `holder` writes its rows, so on a Galera cluster no two nodes write the same row.
pub(crate) async fn add<'e>(ex: impl MySqlExecutor<'e>, holder: &str, done: u64) -> Result<()> {
    sqlx::query(
        "INSERT INTO jobq_done_minutes (minute, holder, done) \
         VALUES (FLOOR(UNIX_TIMESTAMP(NOW(6)) / 60), ?, ?) ON DUPLICATE KEY UPDATE done = done + ?",
    )
    .bind(holder)
    .bind(done)
    .bind(done)
    .execute(ex)
    .await?;
    Ok(())
}

/// Done jobs per minute (minutes since the epoch) from minute `from` on, every process's summed.
pub(crate) async fn since(pool: &MySqlPool, from: i64) -> Result<Vec<(i64, i64)>> {
    Ok(sqlx::query_as(
        "SELECT CAST(minute AS SIGNED), CAST(SUM(done) AS SIGNED) FROM jobq_done_minutes \
         WHERE minute >= ? GROUP BY minute",
    )
    .bind(from)
    .fetch_all(pool)
    .await?)
}

/// Removes the counts older than [`KEPT_MINUTES`]; how many rows went.
pub(crate) async fn forget_old(pool: &MySqlPool) -> Result<u64> {
    let gone = sqlx::query(
        "DELETE FROM jobq_done_minutes WHERE minute < FLOOR(UNIX_TIMESTAMP(NOW(6)) / 60) - ?",
    )
    .bind(KEPT_MINUTES)
    .execute(pool)
    .await?;
    Ok(gone.rows_affected())
}
