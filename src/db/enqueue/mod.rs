//! Inserting jobs. Applications can equally write the same rows with plain SQL; this is the typed way.
//!
//! A job may carry a unique key (migration 0012): while a job of its kind with the key is live (queued,
//! waiting to retry, or running), the UNIQUE index on `unique_slot`, the kind and key in one value
//! (migration 0030; `(unique_live, kind)` before, which collided on a cluster), refuses a second one, and [`enqueue_unique`]
//! answers with the live job's id instead. With [`NewJob::unique_for`] a done job holds its key for a
//! period after it finished too; no generated column can say "finished within the last hour" (they
//! cannot call `NOW()`), so that part is a look-up before the insert, and has a window (see
//! [`NewJob::unique_for`]).
//!
//! This file holds the entry points; the job being built and its checks are in `new_job.rs`, the INSERT
//! statement in `insert.rs`, and the look-ups and rounds of a keyed enqueue in `unique.rs`.

mod checks;
mod debounce;
mod insert;
mod new_job;
mod ordered;
mod unique;

use sqlx::{Connection, MySql};

use crate::errno;
use crate::error::{Error, Result};
use crate::job::JobId;

use insert::{ROWS_PER_INSERT, insert_statement};
pub use new_job::NewJob;
use unique::{ROUNDS, holder_within, insert_or_find};

/// What [`enqueue_unique`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new row was inserted.
    Inserted(JobId),
    /// A job with the same unique key holds it (live, or done within the job's
    /// [`unique_for`](NewJob::unique_for) period); nothing was inserted and this is that job.
    Existing(JobId),
    /// A [debounced](NewJob::debounce) job of the same kind and key was queued and had not started:
    /// it took this enqueue's payload and due time, and this is that job.
    Merged(JobId),
}

impl Enqueued {
    /// The job's id, new or existing.
    pub fn id(self) -> JobId {
        match self {
            Enqueued::Inserted(id) | Enqueued::Existing(id) | Enqueued::Merged(id) => id,
        }
    }

    /// Whether the id is an existing job's (one that holds the key, or that this enqueue merged into).
    pub fn is_existing(self) -> bool {
        !matches!(self, Enqueued::Inserted(_))
    }
}

/// Inserts one job and returns its id, or, for a job with a [unique key](NewJob::unique_key) that
/// another job holds, that job's id ([`enqueue_unique`] says which). `conn` may be a pool, a connection
/// or `&mut *transaction`, so a job can be enqueued in the same transaction as the application's own
/// writes.
pub async fn enqueue<'a, A>(conn: A, job: &NewJob) -> Result<JobId>
where
    A: sqlx::Acquire<'a, Database = MySql>,
{
    Ok(enqueue_unique(conn, job).await?.id())
}

/// Inserts one job, or finds the job holding its [unique key](NewJob::unique_key), and says which.
/// A job without a key is always [`Enqueued::Inserted`].
///
/// Concurrent enqueuers of one key are serialised by the UNIQUE index: exactly one insert wins, the
/// others get error 1062 and read the winner's id (measured in tests/it/unique.rs: 8 enqueuers, 50
/// rounds, never two live jobs with one key). A refused insert rolls back only itself, not the caller's
/// transaction. Ids refused this way are used up (`AUTO_INCREMENT` leaves a gap).
///
/// # Errors
/// [`Error::Invalid`] for a bad key or period, before anything is sent. A deadlock (1213) or lock wait
/// timeout (1205) is tried again under autocommit (19 deadlocks in 3,200 racing enqueues, each gone on
/// the next round); inside the caller's transaction it is returned, because the server rolled the
/// whole transaction back. Whether a transaction is open is what sqlx knows (`begin()`), not a `BEGIN`
/// sent as text.
pub async fn enqueue_unique<'a, A>(conn: A, job: &NewJob) -> Result<Enqueued>
where
    A: sqlx::Acquire<'a, Database = MySql>,
{
    job.validate()?;
    let mut conn = conn.acquire().await?;
    let one = std::slice::from_ref(job);
    if !job.after.is_empty() {
        return Ok(Enqueued::Inserted(insert_waiting(&mut conn, job).await?));
    }
    if let Some(key) = &job.order_key {
        return Ok(Enqueued::Inserted(
            ordered::insert(&mut conn, job, key).await?,
        ));
    }
    if let Some(d) = job.debounced() {
        return debounce::enqueue_one(&mut conn, job, d).await;
    }
    let Some(key) = &job.unique_key else {
        let done = insert_statement(one, false)
            .build()
            .execute(&mut *conn)
            .await?;
        return Ok(Enqueued::Inserted(JobId(done.last_insert_id())));
    };
    let mut round = 0;
    loop {
        round += 1;
        match insert_or_find(&mut conn, job, key).await {
            Ok(done) => return Ok(done),
            // The holder left (try again), or a deadlock rolled back our statement, which under
            // autocommit is all there was. In the caller's transaction a deadlock rolled back the whole
            // transaction: only the caller can start it again.
            // The holder left: look again at once.
            Err(e) if round < ROUNDS && errno::is_duplicate_entry(&e) => {}
            // A deadlock victim: the inserts that waited with it collide again if they all try again
            // at once, so each pauses a jittered while first, as the claim's retries do. (Without
            // the pause, 8 enqueuers on a loaded machine ran out of rounds in a full test run.)
            Err(e)
                if round < ROUNDS && errno::is_lock_conflict(&e) && !conn.is_in_transaction() =>
            {
                tokio::time::sleep(crate::db::transient_pause(round as u32)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Inserts a job that waits for `job.after`, and its edges, in one transaction: a job is never seen
/// `queued` before its edges are there, nor waiting without them.
async fn insert_waiting(conn: &mut sqlx::MySqlConnection, job: &NewJob) -> Result<JobId> {
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    crate::db::deps::prepare_wait(&mut tx, &job.after).await?;
    let id = insert_statement(std::slice::from_ref(job), false)
        .build()
        .execute(&mut *tx)
        .await?
        .last_insert_id();
    let until = if job.after_ended {
        crate::db::deps::Until::Ended
    } else {
        crate::db::deps::Until::Done
    };
    crate::db::deps::wait_for(&mut tx, id, &job.after, until).await?;
    tx.commit().await?;
    Ok(JobId(id))
}

/// Inserts many jobs with multi-row INSERTs of up to 1,000 rows and returns how many were inserted. On a
/// connection or transaction the batches share its fate; on a pool each batch commits by itself.
///
/// A job with a [unique key](NewJob::unique_key) is skipped, not counted and not an error when a live
/// job holds the key, including an earlier job of the same call (the first of several with one key
/// wins), or, with [`unique_for`](NewJob::unique_for), a job done within its period (one look-up per
/// such job before its batch). Callers who need the ids of the jobs holding the keys use
/// [`enqueue_unique`] per job. [Debounced](NewJob::debounce) jobs are sent in statements of their own
/// (one per maximum wait), and one that merges into a queued job is not counted.
pub async fn enqueue_many(conn: &mut sqlx::MySqlConnection, jobs: &[NewJob]) -> Result<u64> {
    for job in jobs {
        job.validate()?;
        if !job.after.is_empty() {
            return Err(Error::invalid(
                "after",
                "enqueue_many takes no dependencies: enqueue a job that waits on its own",
            ));
        }
        if job.order_key.is_some() {
            return Err(Error::invalid(
                "order_key",
                "enqueue_many takes no ordered jobs: enqueue each with enqueue, in its order",
            ));
        }
    }
    let (debounced, jobs): (Vec<&NewJob>, Vec<&NewJob>) =
        jobs.iter().partition(|j| j.debounced().is_some());
    let mut n = debounce::enqueue_many(conn, &debounced).await?;
    for chunk in jobs.chunks(ROWS_PER_INSERT) {
        let mut rows = Vec::with_capacity(chunk.len());
        for job in chunk {
            if let (Some(key), Some(period)) = (&job.unique_key, job.unique_for)
                && holder_within(&mut *conn, &job.kind, key, period)
                    .await?
                    .is_some()
            {
                continue;
            }
            rows.push(*job);
        }
        if rows.is_empty() {
            continue;
        }
        let keyed = rows.iter().any(|j| j.unique_key.is_some());
        n += insert_statement(&rows, keyed)
            .build()
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(n)
}
