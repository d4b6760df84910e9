//! A keyed enqueue (a job with a unique key): the locking look-ups for the job that holds the key, and
//! one round of look-up, insert and look-up again. Kept apart because the order of these statements
//! is what keeps concurrent enqueuers of one key from deadlocking with a worker's finish.

use std::time::Duration;

use crate::errno;
use crate::job::JobId;

use super::Enqueued;
use super::insert::insert_statement;
use super::new_job::NewJob;

/// How many times a keyed enqueue is tried. A round ends without an answer when the holder left the
/// live states between the refusal and the look-up (it finished), or when the insert was chosen as a
/// deadlock victim: several inserts of one key wait on the holder's index entry while a worker's
/// finish rewrites it, and once it commits InnoDB lets one insert go and rolls back the others (seen
/// in tests/it/unique.rs under 8 enqueuers). Either would have to happen this many times in a row.
pub(super) const ROUNDS: usize = 16;

// The look-ups are locking reads: in the caller's REPEATABLE READ transaction a plain SELECT reads the
// transaction's snapshot, which may predate the holder's insert, while a locking read sees the latest
// committed row. A shared lock, so concurrent enqueuers of one key do not wait on each other; it blocks
// the holder's claim or finish only until the caller's transaction ends (at once under autocommit).

// language=MySQL
const LIVE_HOLDER: &str =
    "SELECT id FROM job_queue WHERE unique_live = ? AND kind = ? LOCK IN SHARE MODE";

// language=MySQL
const HOLDER_WITHIN: &str = "SELECT id FROM job_queue WHERE unique_key = ? AND kind = ? \
     AND (state IN ('queued', 'retry', 'running') \
          OR (state = 'done' AND finished_at >= NOW(6) - INTERVAL ? MICROSECOND)) \
     ORDER BY id DESC LIMIT 1 LOCK IN SHARE MODE";

/// The live job of `kind` holding `key`, if any (a key is unique within its kind, schema 17).
async fn live_holder(
    conn: &mut sqlx::MySqlConnection,
    kind: &str,
    key: &str,
) -> std::result::Result<Option<JobId>, sqlx::Error> {
    Ok(sqlx::query_scalar::<_, u64>(LIVE_HOLDER)
        .bind(key.as_bytes())
        .bind(kind)
        .fetch_optional(conn)
        .await?
        .map(JobId))
}

/// A job holding `key` for a new job with this `period`: a live one, or a done one finished less than
/// `period` ago. Both in one read, so a holder that finishes while it runs is seen in one state or the
/// other.
pub(super) async fn holder_within(
    conn: &mut sqlx::MySqlConnection,
    kind: &str,
    key: &str,
    period: Duration,
) -> std::result::Result<Option<JobId>, sqlx::Error> {
    Ok(sqlx::query_scalar::<_, u64>(HOLDER_WITHIN)
        .bind(key.as_bytes())
        .bind(kind)
        .bind(period.as_micros().min(i64::MAX as u128) as i64)
        .fetch_optional(conn)
        .await?
        .map(JobId))
}

/// One round of [`enqueue_unique`](super::enqueue_unique) for a keyed job: the holder (live, or
/// within the job's period), else the insert, else (refused) the holder that won meanwhile. The
/// refusal (1062) when that holder left before the look-up.
///
/// The look-up comes before the insert, not only after a refusal, because a refused insert locks more:
/// its duplicate check holds a shared next-key lock on the holder's index entry, which covers the gap
/// before it, where the holder's own finish inserts its new (NULL) entry. Eight enqueuers inserting a
/// held key made a worker's finish and one of them deadlock again and again (an enqueue failed 16
/// rounds in a row); a locking read of an existing entry locks only that entry.
pub(super) async fn insert_or_find(
    conn: &mut sqlx::MySqlConnection,
    job: &NewJob,
    key: &str,
) -> std::result::Result<Enqueued, sqlx::Error> {
    let holder = match job.unique_for {
        Some(period) => holder_within(conn, &job.kind, key, period).await?,
        None => live_holder(conn, &job.kind, key).await?,
    };
    if let Some(id) = holder {
        return Ok(Enqueued::Existing(id));
    }
    let refused = match insert_statement(std::slice::from_ref(job), false)
        .build()
        .execute(&mut *conn)
        .await
    {
        Ok(done) => return Ok(Enqueued::Inserted(JobId(done.last_insert_id()))),
        Err(e) if errno::is_duplicate_entry(&e) => e,
        Err(e) => return Err(e),
    };
    match live_holder(conn, &job.kind, key).await? {
        Some(id) => Ok(Enqueued::Existing(id)),
        None => Err(refused),
    }
}
