//! Jobs that wait for other jobs (schema 16): the pending edges in `jobq_job_deps`, their insert with
//! the waiting job, the settling of waiting jobs once their dependencies end, and the reaper's sweep.
//!
//! Who settles a waiting job (queues it, or cancels it): the transaction that ends its last
//! dependency. A worker's finish of a job with dependents (`has_dependents`, schema 20) settles them
//! in its own transaction (`db::finish`); an operator's cancel or delete settles the job's dependents
//! at once; an enqueue whose dependencies have all ended already settles the new job before it
//! commits. A reaper's pass ([`sweep`]) is the safety net: rows written by plain SQL, a crash between
//! a finish and its dependents, and the waits that can never end (a cycle, a job that does not exist),
//! which only plain SQL can create and which it cancels, saying why.
//!
//! Settling locks the waiting jobs first, then reads their dependencies' states: two dependencies of
//! one job finishing at once in two transactions are serialised on the waiting job's row, and the
//! second reads the first's committed state (READ COMMITTED), so the job is never left waiting with
//! every dependency done. What each job becomes is a pure decision over what was read ([`decide`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};

use crate::db::push_id_list;
use crate::error::{Error, Result};
use crate::job::State;

/// The most jobs one job may wait for.
pub(crate) const MAX_DEPENDENCIES: usize = 1000;

/// How many waiting jobs one transaction of a sweep settles.
const SWEEP_BATCH: usize = 500;

/// The first step of an enqueue that waits, before the job's insert: locks the jobs of `after` (they are
/// about to gain a dependent, and their finish must see it) and marks them `has_dependents`. The error
/// names the first id that is not a job.
pub(crate) async fn prepare_wait(conn: &mut MySqlConnection, after: &[u64]) -> Result<()> {
    let mut q =
        QueryBuilder::<MySql>::new("SELECT id FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN (");
    push_id_list(&mut q, after);
    q.push(") ORDER BY id FOR UPDATE");
    let found: Vec<u64> = q.build_query_scalar().fetch_all(&mut *conn).await?;
    if let Some(missing) = after.iter().find(|id| !found.contains(id)) {
        return Err(Error::invalid(
            "after",
            format!("job {missing} does not exist: a job can only wait for jobs that are there"),
        ));
    }
    let mut u = QueryBuilder::<MySql>::new(
        "UPDATE job_queue FORCE INDEX (PRIMARY) SET has_dependents = 1 WHERE id IN (",
    );
    push_id_list(&mut u, after);
    u.push(") AND has_dependents = 0");
    u.build().execute(&mut *conn).await?;
    Ok(())
}

/// Makes job `id` wait for `after` (until they are done, or with `ended` until they have ended in any
/// way): the jobs of `after` are locked and marked as having a dependent, the job's state becomes
/// `waiting`, one edge per dependency is stored, and if its dependencies have already ended it is
/// settled at once (queued, or cancelled). In the caller's transaction, with the insert of the job,
/// after [`prepare_wait`].
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
    settle(conn, &[id]).await?;
    Ok(())
}

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

/// How a waiting job waits for one dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// Until it is done; cancelled if it ends otherwise.
    Done,
    /// Until it has ended in any way (a batch's callback).
    Ended,
}

/// One dependency of a waiting job, as read: its id, how it is waited for, and its state (`None`: no
/// such job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) after: u64,
    pub(crate) until: Until,
    pub(crate) state: Option<State>,
}

/// What becomes of a waiting job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Some dependency has not ended as it must yet.
    Wait,
    /// Every dependency ended as it must: queue it, with the outcome counts of the jobs it waited for
    /// until they ended (done, dead, cancelled) when there are any.
    Release(Option<[u64; 3]>),
    /// It can never run: cancel it with this `last_error`.
    Cancel(String),
}

/// What becomes of a waiting job with dependencies `edges`. A missing dependency comes first (nothing
/// else can be said of it), then one that ended dead or cancelled (the lowest id is named), then
/// whether every one has ended as it must. A job with no dependencies at all waits for nothing.
pub(crate) fn decide(edges: &[Edge]) -> Verdict {
    let mut edges = edges.to_vec();
    edges.sort_by_key(|e| e.after);
    if let Some(e) = edges.iter().find(|e| e.state.is_none()) {
        return Verdict::Cancel(format!("waits on job {}, which does not exist", e.after));
    }
    let state = |e: &Edge| e.state.expect("missing ones returned above");
    if let Some(e) = edges
        .iter()
        .find(|e| e.until == Until::Done && matches!(state(e), State::Dead | State::Cancelled))
    {
        return Verdict::Cancel(format!(
            "cancelled: job {}, which it waited for, ended {}",
            e.after,
            state(e)
        ));
    }
    let pending = edges.iter().any(|e| match e.until {
        Until::Done => state(e) != State::Done,
        Until::Ended => !state(e).is_final(),
    });
    if pending {
        return Verdict::Wait;
    }
    let mut counts = [0u64; 3];
    let mut members = false;
    for e in edges.iter().filter(|e| e.until == Until::Ended) {
        members = true;
        match state(e) {
            State::Done => counts[0] += 1,
            State::Dead => counts[1] += 1,
            _ => counts[2] += 1,
        }
    }
    Verdict::Release(members.then_some(counts))
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
        let until = if until == "ended" {
            Until::Ended
        } else {
            Until::Done
        };
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

/// Queues or cancels each job as its verdict says (only while it is still waiting), then forgets the
/// edges of the jobs that no longer wait.
async fn apply(
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
        let mut u = QueryBuilder::<MySql>::new(
            "UPDATE job_queue FORCE INDEX (PRIMARY) SET state = 'queued' WHERE id IN (",
        );
        push_id_list(&mut u, &plain);
        u.push(") AND state = 'waiting'");
        out.released += u.build().execute(&mut *conn).await?.rows_affected();
    }
    for (id, verdict) in verdicts {
        match verdict {
            Verdict::Release(Some([done, dead, cancelled])) => {
                out.released += sqlx::query(
                    "UPDATE job_queue SET state = 'queued', payload = JSON_SET(payload, '$.jobq_batch', \
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

/// The safety net, run by every reaper pass: cancels the jobs that wait in a cycle (only plain SQL can
/// make one), settles every waiting job that can be settled (dependencies ended or missing, or none at
/// all), and forgets the edges of jobs that no longer wait (or no longer exist). Reads the pending
/// edges and the waiting rows only.
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
        let mut tx = pool.begin().await?;
        let verdicts: Vec<(u64, Verdict)> = chunk
            .iter()
            .map(|(id, path)| {
                (
                    *id,
                    Verdict::Cancel(format!("in a dependency cycle: {path}")),
                )
            })
            .collect();
        out += apply(&mut tx, &verdicts).await?;
        tx.commit().await?;
    }
    // Waiting jobs that can be settled now: a dependency missing or ended badly, every one ended as it
    // must, or none at all. `decide` has the last word, on the rows locked.
    let ready: Vec<u64> = sqlx::query_scalar(
        "SELECT w.id FROM job_queue w LEFT JOIN jobq_job_deps d ON d.job_id = w.id \
         LEFT JOIN job_queue p ON p.id = d.after_id \
         WHERE w.state = 'waiting' GROUP BY w.id \
         HAVING COUNT(d.after_id) = 0 OR SUM(p.id IS NULL) > 0 \
         OR SUM(d.until = 'done' AND p.state IN ('dead', 'cancelled')) > 0 \
         OR (SUM(d.until = 'done' AND p.state <> 'done') = 0 \
             AND SUM(d.until = 'ended' AND p.state NOT IN ('done', 'dead', 'cancelled')) = 0)",
    )
    .fetch_all(pool)
    .await?;
    for chunk in ready.chunks(SWEEP_BATCH) {
        let mut tx = pool.begin().await?;
        out += settle(&mut tx, chunk).await?;
        tx.commit().await?;
    }
    // Edges of jobs that no longer wait (released, cancelled, changed by an operator) or are gone.
    sqlx::query(
        "DELETE d FROM jobq_job_deps d LEFT JOIN job_queue j ON j.id = d.job_id \
         WHERE j.id IS NULL OR j.state <> 'waiting'",
    )
    .execute(pool)
    .await?;
    Ok(out)
}

/// The jobs that wait in a cycle, each with one cycle it is on, written `4 -> 7 -> 4` (4 waits for
/// 7, which waits for 4), from the edges (waiting job, job it waits for) between waiting jobs. A job
/// that waits for itself is a cycle of one: `5 -> 5`. Each job's cycle is a shortest one through it.
pub(crate) fn cycles(edges: &[(u64, u64)]) -> Vec<(u64, String)> {
    let mut next: HashMap<u64, BTreeSet<u64>> = HashMap::new();
    for (job, after) in edges {
        next.entry(*job).or_default().insert(*after);
    }
    let mut jobs: Vec<u64> = next.keys().copied().collect();
    jobs.sort_unstable();
    let mut out = Vec::new();
    for start in jobs {
        // Breadth first from `start` until it is reached again: the shortest cycle through it.
        let mut came_from: HashMap<u64, u64> = HashMap::new();
        let mut queue = VecDeque::from([start]);
        let mut closed_by = None;
        while let Some(at) = queue.pop_front() {
            for &n in next.get(&at).into_iter().flatten() {
                if n == start {
                    closed_by = Some(at);
                    break;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = came_from.entry(n) {
                    e.insert(at);
                    queue.push_back(n);
                }
            }
            if closed_by.is_some() {
                break;
            }
        }
        let Some(mut at) = closed_by else { continue };
        let mut path = vec![start];
        let mut tail = Vec::new();
        while at != start {
            tail.push(at);
            at = came_from[&at];
        }
        path.extend(tail.into_iter().rev());
        path.push(start);
        let text = path
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" -> ");
        out.push((start, text));
    }
    out
}

/// A dependency of a job or a job that depends on it, as `jobq jobs show` and the dashboard list them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Link {
    /// The other job.
    pub id: crate::id::JobId,
    /// Its state; `None` when no such job exists (it was deleted).
    pub state: Option<State>,
    /// How the waiting job waits for the other: `done` (runs once it is done) or `ended` (once it
    /// has ended in any way: a batch's callback).
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
/// stretch of the `finished (state, …)` index and those rows.
pub(crate) async fn long_waiting(
    pool: &MySqlPool,
    over: std::time::Duration,
) -> Result<LongWaiting> {
    let over_us = over.as_micros().min(i64::MAX as u128) as i64;
    let (count, oldest_us): (i64, Option<i64>) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(created_at < NOW(6) - INTERVAL ? MICROSECOND), 0) AS SIGNED), \
         TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) \
         FROM job_queue FORCE INDEX (finished) WHERE state = 'waiting'",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(after: u64, until: Until, state: Option<State>) -> Edge {
        Edge {
            after,
            until,
            state,
        }
    }

    #[test]
    fn a_job_runs_once_every_dependency_is_done() {
        use State::*;
        let done = |id| edge(id, Until::Done, Some(Done));
        assert_eq!(decide(&[done(1), done(2)]), Verdict::Release(None));
        assert_eq!(
            decide(&[done(1), edge(2, Until::Done, Some(Running))]),
            Verdict::Wait
        );
        assert_eq!(
            decide(&[done(1), edge(2, Until::Done, Some(Retry))]),
            Verdict::Wait
        );
        assert_eq!(decide(&[]), Verdict::Release(None), "waits for nothing");
    }

    #[test]
    fn a_dependency_that_failed_or_is_missing_cancels_and_says_which() {
        use State::*;
        assert_eq!(
            decide(&[
                edge(9, Until::Done, Some(Cancelled)),
                edge(4, Until::Done, Some(Dead)),
                edge(7, Until::Done, Some(Running)),
            ]),
            Verdict::Cancel("cancelled: job 4, which it waited for, ended dead".into())
        );
        assert_eq!(
            decide(&[
                edge(3, Until::Done, Some(Dead)),
                edge(12, Until::Done, None)
            ]),
            Verdict::Cancel("waits on job 12, which does not exist".into())
        );
    }

    #[test]
    fn a_batch_callback_runs_once_every_member_ended_with_their_outcomes() {
        use State::*;
        let m = |id, s| edge(id, Until::Ended, Some(s));
        assert_eq!(
            decide(&[m(1, Done), m(2, Dead), m(3, Cancelled), m(4, Done)]),
            Verdict::Release(Some([2, 1, 1]))
        );
        assert_eq!(decide(&[m(1, Done), m(2, Queued)]), Verdict::Wait);
    }

    #[test]
    fn cycles_are_named_by_their_shortest_loop() {
        assert_eq!(
            cycles(&[(4, 7), (7, 4), (8, 4)]),
            [
                (4, "4 -> 7 -> 4".to_string()),
                (7, "7 -> 4 -> 7".to_string())
            ]
        );
        assert_eq!(cycles(&[(5, 5)]), [(5, "5 -> 5".to_string())]);
        assert!(cycles(&[(1, 2), (2, 3)]).is_empty(), "a chain is no cycle");
        let long = cycles(&[(1, 2), (2, 3), (3, 1), (1, 3)]);
        assert_eq!(long[0], (1, "1 -> 3 -> 1".to_string()));
        assert_eq!(long[1], (2, "2 -> 3 -> 1 -> 2".to_string()));
    }
}
