//! Settling waiting jobs: locking them, reading their dependencies, and queueing or cancelling each
//! as [`decide`] says, in the caller's transaction. What a finish, a cancel, a delete, an enqueue and
//! the sweep all share.

use std::collections::BTreeMap;

use sqlx::{MySql, MySqlConnection, QueryBuilder};

use super::decide::{Edge, Until, Verdict, decide};
use crate::db::push_id_list;
use crate::job::State;

/// What a pass or a finish did to waiting jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Waiting jobs whose dependencies had all ended as they needed: queued now.
    pub(crate) released: u64,
    /// Waiting jobs that can never run (a dependency ended dead or cancelled, does not exist, or waits
    /// in a cycle): cancelled now, with `last_error` saying why.
    pub(crate) cancelled: u64,
}

impl std::ops::AddAssign for Swept {
    fn add_assign(&mut self, o: Self) {
        self.released += o.released;
        self.cancelled += o.cancelled;
    }
}

/// Settles the jobs of `ids` that are waiting: locks them, reads their dependencies, and queues or
/// cancels each as [`decide`] says; the edges of the jobs it settled are forgotten. In the caller's
/// transaction.
pub(crate) async fn settle(conn: &mut MySqlConnection, ids: &[u64]) -> Result<Swept, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Swept::default());
    }
    let mut q =
        QueryBuilder::<MySql>::new("SELECT id FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN (");
    push_id_list(&mut q, ids);
    q.push(") AND state = 'waiting' ORDER BY id FOR UPDATE");
    let waiting: Vec<u64> = q.build_query_scalar().fetch_all(&mut *conn).await?;
    settle_locked(conn, &waiting).await
}

/// Settles the waiting dependents of `parents`, jobs that have just ended (or gone) in the caller's
/// transaction: what a finish, a cancel or a delete of a job with dependents does.
pub(crate) async fn settle_dependents_of(
    conn: &mut MySqlConnection,
    parents: &[u64],
) -> Result<Swept, sqlx::Error> {
    if parents.is_empty() {
        return Ok(Swept::default());
    }
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT DISTINCT job_id FROM jobq_job_deps FORCE INDEX (after_id) WHERE after_id IN (",
    );
    push_id_list(&mut q, parents);
    q.push(")");
    let dependents: Vec<u64> = q.build_query_scalar().fetch_all(&mut *conn).await?;
    settle(conn, &dependents).await
}

/// [`settle`] on jobs already locked and known to be waiting.
async fn settle_locked(conn: &mut MySqlConnection, waiting: &[u64]) -> Result<Swept, sqlx::Error> {
    if waiting.is_empty() {
        return Ok(Swept::default());
    }
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT d.job_id, d.after_id, CAST(d.until AS CHAR), CAST(p.state AS CHAR) \
         FROM jobq_job_deps d LEFT JOIN job_queue p ON p.id = d.after_id WHERE d.job_id IN (",
    );
    push_id_list(&mut q, waiting);
    q.push(")");
    let rows: Vec<(u64, u64, String, Option<String>)> =
        q.build_query_as().fetch_all(&mut *conn).await?;
    let mut edges: BTreeMap<u64, Vec<Edge>> = waiting.iter().map(|id| (*id, Vec::new())).collect();
    for (job, after, until, state) in rows {
        let until = Until::parse(&until);
        // A state this build does not know (a newer schema's) is taken as not ended yet.
        let state = state.map(|s| s.parse().unwrap_or(State::Running));
        edges.entry(job).or_default().push(Edge {
            after,
            until,
            state,
        });
    }
    let verdicts: Vec<(u64, Verdict)> = edges
        .into_iter()
        .map(|(id, edges)| (id, decide(&edges)))
        .collect();
    apply(conn, &verdicts).await
}

/// The run_at of job `$j` spaced after the start of the job `$p` before it in its lane.
macro_rules! spaced {
    ($j:literal, $p:literal) => {
        concat!(
            "GREATEST(",
            $j,
            ".run_at, ",
            $p,
            ".started_at + INTERVAL ",
            $j,
            ".order_spacing_us MICROSECOND)"
        )
    };
}

/// The release of a job of an order key or fair share (schema 27) puts it behind the jobs already due:
/// its run_at becomes the release time (unless it is later). Otherwise a key's next job, enqueued long
/// ago, would sort ahead of every job enqueued since, and a key with a steady supply of jobs would keep
/// the head of the queue, its `lanes` jobs at a time, while another key's one job waited behind it.
/// Jobs without a key keep their run_at, as dependencies always did.
macro_rules! behind_the_due {
    () => {
        "run_at = IF(order_key IS NULL, run_at, GREATEST(run_at, NOW(6)))"
    };
}

/// A fair share's rate (`order_spacing_us`, schema 25): each job of `ids` that waited for the job before
/// it in its lane is due no sooner than that job's start plus the spacing. Before the release, while the
/// edges are there to say which job came before.
async fn keep_spacing(conn: &mut MySqlConnection, ids: &[u64]) -> Result<(), sqlx::Error> {
    let mut u = QueryBuilder::<MySql>::new(concat!(
        "UPDATE job_queue j JOIN jobq_job_deps d ON d.job_id = j.id JOIN job_queue p ON p.id = d.after_id \
         SET j.run_at = ",
        spaced!("j", "p"),
        " WHERE d.until IN ('next', 'halt') AND j.order_spacing_us IS NOT NULL \
         AND p.started_at IS NOT NULL AND j.id IN ("
    ));
    push_id_list(&mut u, ids);
    u.push(")");
    u.build().execute(&mut *conn).await?;
    Ok(())
}

/// A new job of a fair share with a rate, put in a lane whose last job `tail` has ended: due no sooner
/// than `tail`'s start plus its spacing, as [`keep_spacing`] makes a released job.
pub(crate) async fn space_after(
    conn: &mut MySqlConnection,
    id: u64,
    tail: u64,
) -> Result<(), sqlx::Error> {
    sqlx::query(concat!(
        "UPDATE job_queue j JOIN job_queue p ON p.id = ? SET j.run_at = ",
        spaced!("j", "p"),
        " WHERE j.id = ? AND j.order_spacing_us IS NOT NULL AND p.started_at IS NOT NULL"
    ))
    .bind(tail)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Queues or cancels each job as its verdict says (only while it is still waiting), then forgets the
/// edges of the jobs that no longer wait.
pub(super) async fn apply(
    conn: &mut MySqlConnection,
    verdicts: &[(u64, Verdict)],
) -> Result<Swept, sqlx::Error> {
    let mut out = Swept::default();
    let plain: Vec<u64> = verdicts
        .iter()
        .filter(|(_, v)| *v == Verdict::Release(None))
        .map(|(id, _)| *id)
        .collect();
    if !plain.is_empty() {
        keep_spacing(conn, &plain).await?;
        let mut u = QueryBuilder::<MySql>::new(concat!(
            "UPDATE job_queue FORCE INDEX (PRIMARY) SET state = 'queued', debounce_key = NULL, ",
            behind_the_due!(),
            " WHERE id IN ("
        ));
        push_id_list(&mut u, &plain);
        u.push(") AND state = 'waiting'");
        out.released += u.build().execute(&mut *conn).await?.rows_affected();
    }
    for (id, verdict) in verdicts {
        match verdict {
            Verdict::Release(Some([done, dead, cancelled])) => {
                out.released += sqlx::query(
                    "UPDATE job_queue SET state = 'queued', debounce_key = NULL, payload = JSON_SET(payload, '$.jobq_batch', \
                     JSON_OBJECT('done', ?, 'dead', ?, 'cancelled', ?)) WHERE id = ? AND state = 'waiting'",
                )
                .bind(done)
                .bind(dead)
                .bind(cancelled)
                .bind(id)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            }
            Verdict::Cancel(why) => {
                out.cancelled += sqlx::query(
                    "UPDATE job_queue SET state = 'cancelled', finished_at = NOW(6), last_error = ? \
                     WHERE id = ? AND state = 'waiting'",
                )
                .bind(why)
                .bind(id)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            }
            Verdict::Wait | Verdict::Release(None) => {}
        }
    }
    let settled: Vec<u64> = verdicts
        .iter()
        .filter(|(_, v)| *v != Verdict::Wait)
        .map(|(id, _)| *id)
        .collect();
    forget(conn, &settled).await?;
    Ok(out)
}

/// Forgets the edges of jobs `ids`, which no longer wait.
pub(crate) async fn forget(conn: &mut MySqlConnection, ids: &[u64]) -> Result<(), sqlx::Error> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut d = QueryBuilder::<MySql>::new("DELETE FROM jobq_job_deps WHERE job_id IN (");
    push_id_list(&mut d, ids);
    d.push(")");
    d.build().execute(&mut *conn).await?;
    Ok(())
}
