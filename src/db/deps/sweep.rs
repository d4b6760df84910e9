//! The reaper's safety net over waiting jobs: the waits only plain SQL can create (a cycle, a job that
//! does not exist), rows written by plain SQL, and a crash between a finish and its dependents.

use sqlx::MySqlPool;

use super::cycles::cycles;
use super::decide::Verdict;
use super::settle::{Swept, apply, settle};
use crate::db::retry_transient;
use crate::error::Result;

/// How many waiting jobs one transaction of a sweep settles.
const SWEEP_BATCH: usize = 500;

/// Each transaction of a sweep is tried this many times on a deadlock or a lock wait timeout: it locks
/// waiting jobs that a worker's finish may be settling at the same moment, in another order.
const TRIES: u32 = 5;

/// The safety net, run by every reaper pass: cancels the jobs that wait in a cycle (only plain SQL can
/// make one), settles every waiting job that can be settled (dependencies ended or missing, or none at
/// all), and forgets the edges of jobs that no longer wait (or no longer exist). Reads the pending
/// edges and the waiting rows only (those through the `rare_state` index).
pub(crate) async fn sweep(pool: &MySqlPool) -> Result<Swept> {
    let mut out = Swept::default();
    // Cycles: edges between two waiting jobs.
    let between: Vec<(u64, u64)> = sqlx::query_as(
        "SELECT d.job_id, d.after_id FROM jobq_job_deps d \
         JOIN job_queue w ON w.id = d.job_id AND w.state = 'waiting' \
         JOIN job_queue p ON p.id = d.after_id AND p.state = 'waiting'",
    )
    .fetch_all(pool)
    .await?;
    let cycles = cycles(&between);
    for chunk in cycles.chunks(SWEEP_BATCH) {
        let verdicts: Vec<(u64, Verdict)> = chunk
            .iter()
            .map(|(id, path)| {
                (
                    *id,
                    Verdict::Cancel(format!("in a dependency cycle: {path}")),
                )
            })
            .collect();
        out += retry_transient("dependency sweep", TRIES, || async {
            let mut tx = pool.begin().await?;
            let swept = apply(&mut tx, &verdicts).await?;
            tx.commit().await?;
            Ok(swept)
        })
        .await?;
    }
    // Waiting jobs that can be settled now: a dependency missing or ended badly, every one ended as it
    // must, or none at all. A keyed job with no edge yet may be in the middle of `jobq_enqueue_keyed`
    // under autocommit (inserted, its edge not yet stored): it is left a minute, after which it is the
    // leftover of a lost connection and runs. `decide` has the last word, on the rows locked.
    let ready: Vec<u64> = sqlx::query_scalar(
        "SELECT w.id FROM job_queue w LEFT JOIN jobq_job_deps d ON d.job_id = w.id \
         LEFT JOIN job_queue p ON p.id = d.after_id \
         WHERE w.rare_state = 'waiting' GROUP BY w.id \
         HAVING (COUNT(d.after_id) = 0 AND (MAX(w.order_key) IS NULL \
                 OR MAX(w.created_at) < NOW(6) - INTERVAL 1 MINUTE)) \
         OR SUM(p.id IS NULL) > 0 \
         OR SUM(d.until = 'done' AND p.state IN ('dead', 'cancelled')) > 0 \
         OR (SUM(d.until = 'done' AND p.state <> 'done') = 0 \
             AND SUM(d.until IN ('ended', 'next') AND p.state NOT IN ('done', 'dead', 'cancelled')) = 0 \
             AND SUM(d.until = 'halt' AND p.state NOT IN ('done', 'cancelled')) = 0)",
    )
    .fetch_all(pool)
    .await?;
    for chunk in ready.chunks(SWEEP_BATCH) {
        out += retry_transient("dependency sweep", TRIES, || async {
            let mut tx = pool.begin().await?;
            let swept = settle(&mut tx, chunk).await?;
            tx.commit().await?;
            Ok(swept)
        })
        .await?;
    }
    // Edges of jobs that no longer wait (released, cancelled, changed by an operator) or are gone. Tried
    // again as the transactions above are: it can deadlock with a finish settling the same edges.
    retry_transient("dependency sweep", TRIES, || async {
        sqlx::query(
            "DELETE d FROM jobq_job_deps d LEFT JOIN job_queue j ON j.id = d.job_id \
             WHERE j.id IS NULL OR j.state <> 'waiting'",
        )
        .execute(pool)
        .await?;
        Ok(())
    })
    .await?;
    Ok(out)
}
