//! An ordered enqueue (schema 27): the job waits for the job enqueued before it with the same order
//! key, as a dependency, so that the jobs of one key run one at a time in their order. The key's row in
//! `jobq_order_keys` is the turnstile: enqueuers of one key take turns on it, and each reads and moves
//! the key's tail under it. The stored procedure `jobq_enqueue_ordered` (schema 28) is the same steps
//! in SQL, for applications that enqueue with plain SQL.

use sqlx::Connection;

use crate::db::deps::{self, Until};
use crate::error::Result;
use crate::job::JobId;

use super::insert::insert_statement;
use super::new_job::NewJob;

// language=MySQL
const LOCK_KEY: &str = "INSERT INTO jobq_order_keys (order_key) VALUES (?) \
     ON DUPLICATE KEY UPDATE tail_id = tail_id";
// language=MySQL
const TAIL: &str = "SELECT tail_id FROM jobq_order_keys WHERE order_key = ? FOR UPDATE";
// language=MySQL
const TAIL_STATE: &str = "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = ? FOR UPDATE";
// language=MySQL
const MOVE_TAIL: &str = "UPDATE jobq_order_keys SET tail_id = ? WHERE order_key = ?";

/// Inserts `job`, ordered by `key`, in one transaction (a savepoint inside the caller's): the key's row
/// is locked and the tail read; the job is inserted and, while the tail has not ended as the job's
/// [`Until`] needs, made to wait for it; the tail moves to the new job.
///
/// The key's row stays locked until the caller's transaction ends, and so does the tail's row (its
/// finish must see its new dependent, as for any dependency): keep a transaction that enqueues ordered
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
    let mut tx = conn.begin().await?;
    sqlx::query(LOCK_KEY)
        .bind(key.as_bytes())
        .execute(&mut *tx)
        .await?;
    let tail: u64 = sqlx::query_scalar(TAIL)
        .bind(key.as_bytes())
        .fetch_one(&mut *tx)
        .await?;
    let tail_state: Option<String> = if tail == 0 {
        None
    } else {
        sqlx::query_scalar(TAIL_STATE)
            .bind(tail)
            .fetch_optional(&mut *tx)
            .await?
    };
    let waits = match tail_state.as_deref() {
        Some("queued" | "retry" | "running" | "waiting") => true,
        Some("dead") => until == Until::Halt,
        _ => false,
    };
    let id = insert_statement(std::slice::from_ref(job), false)
        .build()
        .execute(&mut *tx)
        .await?
        .last_insert_id();
    if waits {
        deps::prepare_wait(&mut tx, &[tail]).await?;
        deps::wait_for(&mut tx, id, &[tail], until).await?;
    }
    sqlx::query(MOVE_TAIL)
        .bind(id)
        .bind(key.as_bytes())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(JobId(id))
}
