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
//! every dependency done. What each job becomes is a pure decision over what was read
//! ([`decide`](decide::decide)).
//!
//! This file holds the enqueue's side (a new job's edges); the pure decision is in `decide.rs`, the
//! settling in `settle.rs`, the reaper's sweep in `sweep.rs` and its cycle finder in `cycles.rs`, and
//! what the CLI, the dashboard and the gauges read in `read.rs`.

mod cycles;
mod decide;
mod read;
mod settle;
mod sweep;

use sqlx::{MySql, MySqlConnection, QueryBuilder};

use crate::db::push_id_list;
use crate::error::{Error, Result};

pub(crate) use decide::Until;
pub use read::{Dependencies, Link, LongWaiting};
pub(crate) use read::{long_waiting, of_job};
use settle::settle;
pub(crate) use settle::{forget, settle_dependents_of, space_after};
pub(crate) use sweep::sweep;

/// The most jobs one job may wait for.
pub(crate) const MAX_DEPENDENCIES: usize = 1000;

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

/// Makes job `id` wait for `after` (`until` they are done, have ended in any way, or, for an order
/// key's predecessor, as [`Until::Next`] and [`Until::Halt`] say): the jobs of `after` are locked and marked as having a dependent, the job's state becomes
/// `waiting`, one edge per dependency is stored, and if its dependencies have already ended it is
/// settled at once (queued, or cancelled). In the caller's transaction, with the insert of the job,
/// after [`prepare_wait`].
pub(crate) async fn wait_for(
    conn: &mut MySqlConnection,
    id: u64,
    after: &[u64],
    until: Until,
) -> Result<()> {
    sqlx::query("UPDATE job_queue SET state = 'waiting' WHERE id = ?")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    let until = until.as_str();
    let mut q =
        QueryBuilder::<MySql>::new("INSERT IGNORE INTO jobq_job_deps (job_id, after_id, until) ");
    q.push_values(after, |mut row, after_id| {
        row.push_bind(id).push_bind(*after_id).push_bind(until);
    });
    q.build().execute(&mut *conn).await?;
    settle(conn, &[id]).await?;
    Ok(())
}
