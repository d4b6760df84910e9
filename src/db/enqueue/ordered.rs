//! A keyed enqueue (schema 27): an ordered key's job (one lane) or a fair share's (several) waits for
//! the job enqueued before it in its lane, as a dependency, so that at most `lanes` jobs of a key run at
//! once, each lane in order. The key's lane rows in `jobq_order_keys` are the turnstile: enqueuers of
//! one key take turns on them, and each picks a lane and moves its tail under them. The stored
//! procedure `jobq_enqueue_keyed` (schema 28) is the same steps in SQL, for applications that enqueue
//! with plain SQL.

use sqlx::{Connection, MySql, QueryBuilder};

use crate::db::deps::{self, Until};
use crate::error::Result;
use crate::job::JobId;

use super::insert::insert_statement;
use super::new_job::NewJob;

// language=MySQL
const LANES: &str = "SELECT k.lane, k.tail_id, CAST(j.state AS CHAR) \
     FROM jobq_order_keys k LEFT JOIN job_queue j ON j.id = k.tail_id \
     WHERE k.order_key = ? AND k.lane < ? ORDER BY k.lane";
// language=MySQL
const TAIL_STATE: &str = "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = ? FOR UPDATE";
// language=MySQL
const MOVE_TAIL: &str = "UPDATE jobq_order_keys SET tail_id = ? WHERE order_key = ? AND lane = ?";

/// Whether a lane whose last job is in `state` holds the next job of the lane back.
fn holds(state: Option<&str>, until: Until) -> bool {
    match state {
        Some("queued" | "retry" | "running" | "waiting") => true,
        Some("dead") => until == Until::Halt,
        _ => false,
    }
}

/// Inserts `job` under `key`, in one transaction (a savepoint inside the caller's): the key's lane rows
/// are locked (created when missing), a lane is picked (the first whose last job no longer holds it,
/// else the one whose last job is oldest), the job is inserted and, while that lane's last job holds
/// it, made to wait for it; the lane's tail moves to the new job.
///
/// The lane rows stay locked until the caller's transaction ends, and so does the predecessor's row (its
/// finish must see its new dependent, as for any dependency): keep a transaction that enqueues keyed
/// jobs short.
pub(super) async fn insert(
    conn: &mut sqlx::MySqlConnection,
    job: &NewJob,
    key: &str,
) -> Result<JobId> {
    let until = if job.order_halt {
        Until::Halt
    } else {
        Until::Next
    };
    let lanes = job.order_lanes;
    let mut tx = conn.begin().await?;
    // One statement locks every lane row in lane order, so enqueuers of a key never wait crosswise.
    let mut lock = QueryBuilder::<MySql>::new("INSERT INTO jobq_order_keys (order_key, lane) ");
    lock.push_values(0..lanes, |mut row, lane| {
        row.push_bind(key.as_bytes()).push_bind(lane);
    });
    lock.push(" ON DUPLICATE KEY UPDATE tail_id = tail_id");
    lock.build().execute(&mut *tx).await?;
    // The states are read without locks: a job seen ended stays ended (only an operator's retry brings
    // one back), and the lane's tail is locked and read again below before the job waits on it.
    let seen: Vec<(u16, u64, Option<String>)> = sqlx::query_as(LANES)
        .bind(key.as_bytes())
        .bind(lanes)
        .fetch_all(&mut *tx)
        .await?;
    let (lane, tail) = seen
        .iter()
        .min_by_key(|(lane, tail, state)| (holds(state.as_deref(), until), *tail, *lane))
        .map(|(lane, tail, _)| (*lane, *tail))
        .unwrap_or((0, 0));
    let tail_state: Option<String> = if tail == 0 {
        None
    } else {
        sqlx::query_scalar(TAIL_STATE)
            .bind(tail)
            .fetch_optional(&mut *tx)
            .await?
    };
    let id = insert_statement(std::slice::from_ref(job), false)
        .build()
        .execute(&mut *tx)
        .await?
        .last_insert_id();
    if holds(tail_state.as_deref(), until) {
        deps::prepare_wait(&mut tx, &[tail]).await?;
        deps::wait_for(&mut tx, id, &[tail], until).await?;
    } else if tail != 0 && job.order_rate.is_some() {
        deps::space_after(&mut tx, id, tail).await?;
    }
    sqlx::query(MOVE_TAIL)
        .bind(id)
        .bind(key.as_bytes())
        .bind(lane)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(JobId(id))
}
