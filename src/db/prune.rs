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
/// ended as long ago. Returns how many jobs were deleted. Walks the `state_claim` (done) and
/// `rare_state` (dead, cancelled) indexes, and the schedule log's `finished` index, one batch at a time.
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
    let mut total = 0;
    // Done rows carry no claim, so `claim IS NULL` makes each batch one range of `state_claim`, in
    // finished_at order; the second pass takes the rare done row a plain-SQL change left a token on.
    // Dead and cancelled rows are one range each of `rare_state (rare_state, finished_at)`.
    let done = |claim| {
        format!(
            "DELETE FROM job_queue WHERE state = ? AND claim {claim} \
             AND finished_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?"
        )
    };
    let rare = "DELETE FROM job_queue WHERE rare_state = ? \
                AND finished_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?";
    let passes = [
        ("done", done("IS NULL")),
        ("done", done("IS NOT NULL")),
        ("dead", rare.to_string()),
        ("cancelled", rare.to_string()),
    ];
    for (state, sql) in &passes {
        let (state, sql) = (*state, sql.as_str());
        loop {
            let n = retry_transient("prune", 5, || async {
                sqlx::query(sql)
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
