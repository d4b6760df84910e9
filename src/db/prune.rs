//! Deleting finished jobs past their retention, in small batches so no statement holds many locks or
//! runs long.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::MySqlPool;

use crate::db::retry_transient;
use crate::error::Result;

/// Rows per DELETE.
pub(crate) const PRUNE_BATCH: u32 = 1000;

/// Deletes done, dead and cancelled jobs that finished more than `retention` ago, and schedule runs that
/// ended as long ago. Returns how many jobs were deleted. Walks the primary key for done rows
/// ([`prune_done`]), the `rare_state` index for dead and cancelled ones, and the schedule log's
/// `finished` index, one batch at a time.
pub(crate) async fn prune_finished(pool: &MySqlPool, retention: Duration) -> Result<u64> {
    prune_counting(pool, retention, &AtomicU64::new(0)).await
}

/// [`prune_finished`], adding each batch's deleted jobs to `deleted` as it commits, for a progress
/// display to read while a long history is deleted.
pub(crate) async fn prune_counting(
    pool: &MySqlPool,
    retention: Duration,
    deleted: &AtomicU64,
) -> Result<u64> {
    let secs = retention.as_secs_f64();
    let mut total = prune_done(pool, secs, deleted).await?;
    // Dead and cancelled rows are one range each of `rare_state (rare_state, rare_at)`, rare_at being
    // their finished_at (schema 42).
    for state in ["dead", "cancelled"] {
        loop {
            let n = retry_transient("prune", 5, || async {
                sqlx::query(
                    "DELETE FROM job_queue WHERE rare_state = ? \
                     AND rare_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?",
                )
                .bind(state)
                .bind((secs * 1e6) as i64)
                .bind(PRUNE_BATCH)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
            })
            .await?;
            total += n;
            deleted.fetch_add(n, Ordering::Relaxed);
            if n < u64::from(PRUNE_BATCH) {
                break;
            }
        }
    }
    // Attempts go with their jobs: those that ended before the retention (a job still waiting for a
    // retry after that long keeps its row, not its oldest attempts).
    delete_older(
        pool,
        "prune attempts",
        "DELETE FROM jobq_attempts WHERE ended_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?",
        secs,
    )
    .await?;
    delete_older(
        pool,
        "prune runs",
        "DELETE FROM jobq_schedule_runs WHERE finished_at < NOW(6) - INTERVAL ? MICROSECOND \
         AND outcome IS NOT NULL LIMIT ?",
        secs,
    )
    .await?;
    Ok(total)
}

/// How many ids of `job_queue` one step of [`prune_done`] reads.
const PRUNE_SPAN: u64 = 10_000;

/// Deletes done jobs that finished more than `secs` ago, adding each batch to `deleted`. Done rows have
/// no index of their own (an entry moved by every finish costs every job more than pruning saves), so
/// this walks the primary key from its start, [`PRUNE_SPAN`] ids a step, and stops after the first
/// step whose rows were all created after the cutoff: ids grow with `created_at`, and a job cannot
/// finish before it was created, so the rows further on cannot be due. On a table pruned regularly the
/// walk reads the rows older than the retention, which are few (jobs scheduled far ahead, long waits).
/// Each step reads its rows without locks and deletes the due ones by id, re-checked under the lock,
/// so live rows in the walk (queued, running) are never locked.
async fn prune_done(pool: &MySqlPool, secs: f64, deleted: &AtomicU64) -> Result<u64> {
    let age_us = (secs * 1e6) as i64;
    let mut total = 0;
    let mut after = 0u64;
    loop {
        let from: Option<u64> = sqlx::query_scalar("SELECT MIN(id) FROM job_queue WHERE id > ?")
            .bind(after)
            .fetch_one(pool)
            .await?;
        let Some(from) = from else {
            return Ok(total);
        };
        let until = from.saturating_add(PRUNE_SPAN);
        let (due, older): (Option<String>, Option<i64>) = sqlx::query_as(
            "SELECT JSON_ARRAYAGG(IF(state = 'done' AND finished_at < NOW(6) - INTERVAL ? MICROSECOND, \
             id, NULL)), CAST(SUM(created_at < NOW(6) - INTERVAL ? MICROSECOND) AS SIGNED) \
             FROM job_queue FORCE INDEX (PRIMARY) WHERE id >= ? AND id < ?",
        )
        .bind(age_us)
        .bind(age_us)
        .bind(from)
        .bind(until)
        .fetch_one(pool)
        .await?;
        let due: Vec<u64> = due
            .and_then(|d| serde_json::from_str::<Vec<Option<u64>>>(&d).ok())
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .collect();
        for batch in due.chunks(PRUNE_BATCH as usize) {
            let n = retry_transient("prune", 5, || async {
                let mut q = sqlx::QueryBuilder::<sqlx::MySql>::new(
                    "DELETE FROM job_queue WHERE state = 'done' \
                     AND finished_at < NOW(6) - INTERVAL ",
                );
                q.push_bind(age_us).push(" MICROSECOND AND id IN (");
                crate::db::push_id_list(&mut q, batch);
                q.push(")");
                q.build().execute(pool).await.map(|r| r.rows_affected())
            })
            .await?;
            total += n;
            deleted.fetch_add(n, Ordering::Relaxed);
        }
        if older.unwrap_or(0) == 0 {
            return Ok(total);
        }
        after = until - 1;
    }
}

/// Runs `sql` (binding the age in microseconds and [`PRUNE_BATCH`]) until it deletes less than a batch.
async fn delete_older(pool: &MySqlPool, what: &str, sql: &str, secs: f64) -> Result<()> {
    loop {
        let n = retry_transient(what, 5, || async {
            sqlx::query(sql)
                .bind((secs * 1e6) as i64)
                .bind(PRUNE_BATCH)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })
        .await?;
        if n < u64::from(PRUNE_BATCH) {
            return Ok(());
        }
    }
}
