//! Jobs that wait for other jobs (schema 16): the pending edges in `jobq_job_deps`, their insert with
//! the waiting job, and the sweep that releases or cancels waiting jobs once their dependencies end.

use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};

use crate::error::{Error, Result};

/// The most jobs one job may wait for.
pub(crate) const MAX_DEPENDENCIES: usize = 1000;

/// Checks that every id of `after` names a job; the error names the first that does not.
pub(crate) async fn check_exist(conn: &mut MySqlConnection, after: &[u64]) -> Result<()> {
    let mut q = QueryBuilder::<MySql>::new("SELECT id FROM job_queue WHERE id IN (");
    let mut list = q.separated(", ");
    for id in after {
        list.push_bind(*id);
    }
    q.push(")");
    let found: Vec<u64> = q.build_query_scalar().fetch_all(&mut *conn).await?;
    match after.iter().find(|id| !found.contains(id)) {
        Some(missing) => Err(Error::invalid(
            "after",
            format!("job {missing} does not exist: a job can only wait for jobs that are there"),
        )),
        None => Ok(()),
    }
}

/// Makes job `id` wait for `after` (until they are done, or with `ended` until they have ended in any
/// way): its state becomes `waiting` and one edge per dependency is stored. In the caller's
/// transaction, with the insert of the job.
pub(crate) async fn wait_for(
    conn: &mut MySqlConnection,
    id: u64,
    after: &[u64],
    ended: bool,
) -> Result<()> {
    sqlx::query("UPDATE job_queue SET state = 'waiting' WHERE id = ?")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    let until = if ended { "ended" } else { "done" };
    let mut q =
        QueryBuilder::<MySql>::new("INSERT IGNORE INTO jobq_job_deps (job_id, after_id, until) ");
    q.push_values(after, |mut row, after_id| {
        row.push_bind(id).push_bind(*after_id).push_bind(until);
    });
    q.build().execute(&mut *conn).await?;
    Ok(())
}

/// What a sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Waiting jobs whose dependencies were all done: queued now.
    pub(crate) released: u64,
    /// Waiting jobs one of whose dependencies ended dead or cancelled: cancelled now.
    pub(crate) cancelled: u64,
}

/// Releases the waiting jobs whose dependencies are all done, cancels those with a dependency that
/// ended dead or cancelled (cancelled jobs are released to their own dependents' sweep, so a chain
/// cancels one link per pass), and forgets the edges of jobs that no longer wait. Each statement reads
/// the pending edges only. The derived tables are materialized, which is what lets an UPDATE of
/// job_queue read job_queue (MySQL and MariaDB refuse a plain subquery on the updated table, error 1093).
pub(crate) async fn sweep(pool: &MySqlPool) -> Result<Swept> {
    // Released: no 'done' edge to a job that is not done, no 'ended' edge to a job still going. A
    // batch callback (any 'ended' edge) gets its members' outcome counts in its payload.
    let released = sqlx::query(
        "UPDATE job_queue j JOIN (SELECT d.job_id, SUM(d.until = 'ended') AS members, \
         SUM(d.until = 'ended' AND p.state = 'done') AS done, \
         SUM(d.until = 'ended' AND p.state = 'dead') AS dead, \
         SUM(d.until = 'ended' AND p.state = 'cancelled') AS cancelled \
         FROM jobq_job_deps d \
         JOIN job_queue w ON w.id = d.job_id AND w.state = 'waiting' \
         JOIN job_queue p ON p.id = d.after_id \
         GROUP BY d.job_id \
         HAVING SUM(d.until = 'done' AND p.state <> 'done') = 0 \
         AND SUM(d.until = 'ended' AND p.state NOT IN ('done', 'dead', 'cancelled')) = 0) r \
         ON r.job_id = j.id \
         SET j.state = 'queued', j.payload = IF(r.members > 0, JSON_SET(j.payload, '$.jobq_batch', \
         JSON_OBJECT('done', r.done, 'dead', r.dead, 'cancelled', r.cancelled)), j.payload) \
         WHERE j.state = 'waiting'",
    )
    .execute(pool)
    .await?
    .rows_affected();
    let cancelled = sqlx::query(
        "UPDATE job_queue j JOIN (SELECT d.job_id, MIN(p.id) AS blocker, \
         MIN(CAST(p.state AS CHAR)) AS how FROM jobq_job_deps d \
         JOIN job_queue w ON w.id = d.job_id AND w.state = 'waiting' \
         JOIN job_queue p ON p.id = d.after_id AND p.state IN ('dead', 'cancelled') \
         WHERE d.until = 'done' \
         GROUP BY d.job_id) b ON b.job_id = j.id \
         SET j.state = 'cancelled', j.finished_at = NOW(6), \
         j.last_error = CONCAT('cancelled: job ', b.blocker, ', which it waited for, ended ', b.how) \
         WHERE j.state = 'waiting'",
    )
    .execute(pool)
    .await?
    .rows_affected();
    // Edges of jobs that no longer wait (released, cancelled, or changed by an operator).
    sqlx::query(
        "DELETE d FROM jobq_job_deps d JOIN job_queue j ON j.id = d.job_id \
         WHERE j.state <> 'waiting'",
    )
    .execute(pool)
    .await?;
    Ok(Swept {
        released,
        cancelled,
    })
}
