//! Debounced enqueues (schema 26): one `INSERT … ON DUPLICATE KEY UPDATE` either inserts the job or
//! merges it into the queued, never-started job of its kind and key. One statement, so there is no
//! look-up to race with: the UNIQUE index on `debounce_slot` (the kind and key while queued, schema 30) decides, as it does for an
//! application's own plain-SQL form (docs/debounce.md).

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Connection;

use crate::errno;
use crate::error::Result;
use crate::job::JobId;

use super::Enqueued;
use super::insert::{ROWS_PER_INSERT, debounce_statement};
use super::new_job::{Debounce, NewJob};
use super::unique::ROUNDS;

/// Inserts or merges one debounced job.
///
/// Enqueuers of one key and a worker claiming its job take locks on the same index entry in different
/// orders, and InnoDB then rolls one statement back as a deadlock victim. Under autocommit that
/// statement was all there was, so it is sent again after a jittered pause (as a keyed enqueue's is);
/// in the caller's transaction the whole transaction was rolled back and the error is returned.
pub(super) async fn enqueue_one(
    conn: &mut sqlx::MySqlConnection,
    job: &NewJob,
    d: Debounce,
) -> Result<Enqueued> {
    let mut round = 0;
    loop {
        round += 1;
        match debounce_statement(std::slice::from_ref(job), d.max)
            .build()
            .execute(&mut *conn)
            .await
        {
            Ok(done) => {
                let id = JobId(done.last_insert_id());
                return Ok(if done.rows_affected() == 1 {
                    Enqueued::Inserted(id)
                } else {
                    Enqueued::Merged(id)
                });
            }
            Err(e)
                if round < ROUNDS && errno::is_lock_conflict(&e) && !conn.is_in_transaction() =>
            {
                tokio::time::sleep(crate::db::transient_pause(round as u32)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Inserts or merges many debounced jobs, in statements of up to [`ROWS_PER_INSERT`] rows that share
/// a maximum wait (a statement binds one), and returns how many were inserted: each inserted row
/// counts 1 affected row and each merged one 2, so of `n` rows `2n - affected` were inserted.
pub(super) async fn enqueue_many(
    conn: &mut sqlx::MySqlConnection,
    jobs: &[&NewJob],
) -> Result<u64> {
    let mut by_max: BTreeMap<Duration, Vec<&NewJob>> = BTreeMap::new();
    for &job in jobs {
        if let Some(d) = job.debounced() {
            by_max.entry(d.max).or_default().push(job);
        }
    }
    let mut inserted = 0;
    for (max, group) in by_max {
        for chunk in group.chunks(ROWS_PER_INSERT) {
            let affected = debounce_statement(chunk, max)
                .build()
                .execute(&mut *conn)
                .await?
                .rows_affected();
            inserted += (2 * chunk.len() as u64).saturating_sub(affected);
        }
    }
    Ok(inserted)
}
