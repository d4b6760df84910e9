//! Inserting jobs. Applications can equally write the same rows with plain SQL; this is the typed way.
//!
//! A job may carry a unique key (migration 0012): while a job of its kind with the key is live (queued,
//! waiting to retry, or running), the UNIQUE index on `(unique_live, kind)` (migration 0017) refuses a
//! second one, and [`enqueue_unique`]
//! answers with the live job's id instead. With [`NewJob::unique_for`] a done job holds its key for a
//! period after it finished too; no generated column can say "finished within the last hour" (they
//! cannot call `NOW()`), so that part is a look-up before the insert, and has a window (see
//! [`NewJob::unique_for`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Connection, MySql, QueryBuilder};

use crate::errno;
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::name::{Name, check_unique_key};

/// Rows per multi-row INSERT: at most seven placeholders a row stays far below the protocol's 65,535, and the
/// statement stays well under the default `max_allowed_packet` for typical payloads.
const ROWS_PER_INSERT: usize = 1000;

/// A job to insert. Only the kind is required; everything else has the table's default.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub(crate) kind: String,
    pub(crate) payload: String,
    pub(crate) queue: Option<String>,
    pub(crate) priority: Option<i16>,
    pub(crate) run_at: Option<RunAt>,
    pub(crate) max_attempts: Option<u16>,
    pub(crate) timeout_secs: Option<u32>,
    pub(crate) unique_key: Option<String>,
    pub(crate) unique_for: Option<Duration>,
    pub(crate) after: Vec<u64>,
    /// With `after`: wait until those jobs have ended in any way (a batch's callback), not until done.
    pub(crate) after_ended: bool,
}

/// What [`enqueue_unique`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new row was inserted.
    Inserted(JobId),
    /// A job with the same unique key holds it (live, or done within the job's
    /// [`unique_for`](NewJob::unique_for) period); nothing was inserted and this is that job.
    Existing(JobId),
}

impl Enqueued {
    /// The job's id, new or existing.
    pub fn id(self) -> JobId {
        match self {
            Enqueued::Inserted(id) | Enqueued::Existing(id) => id,
        }
    }

    /// Whether the id is an existing job's.
    pub fn is_existing(self) -> bool {
        matches!(self, Enqueued::Existing(_))
    }
}

/// When a job becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunAt {
    /// At this instant.
    At(DateTime<Utc>),
    /// This long after the database's `NOW(6)` at insert time (so client clock skew does not matter).
    After(Duration),
}

impl NewJob {
    /// A job of `kind` with an empty object as payload.
    pub fn new(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            payload: "{}".into(),
            queue: None,
            priority: None,
            run_at: None,
            max_attempts: None,
            timeout_secs: None,
            unique_key: None,
            unique_for: None,
            after: Vec::new(),
            after_ended: false,
        }
    }

    /// Jobs this one waits for: it stays `waiting` (not claimable) until every one of them is done,
    /// and is cancelled, naming which, if one of them ends dead or cancelled. The jobs must exist
    /// already, so dependencies never form a cycle. A reaper pass releases it (every 2 s by default):
    /// run a reaper. At most 1,000; not with a unique key.
    pub fn after(mut self, jobs: impl IntoIterator<Item = JobId>) -> Self {
        self.after = jobs.into_iter().map(|id| id.0).collect();
        self.after.sort_unstable();
        self.after.dedup();
        self.after_ended = false;
        self
    }

    /// A batch's callback: this job waits until every job of `members` has *ended* (done, dead or
    /// cancelled), then runs once, with their outcome counts added to its payload as
    /// `"jobq_batch": {"done": 8, "dead": 1, "cancelled": 1}` (the payload must be a JSON object). It is
    /// never cancelled by a member's failure. Like [`NewJob::after`], the members must exist already,
    /// and a reaper pass releases it.
    pub fn after_all_ended(mut self, members: impl IntoIterator<Item = JobId>) -> Self {
        self = self.after(members);
        self.after_ended = true;
        self
    }

    /// Sets the payload from any serializable value.
    pub fn payload<T: serde::Serialize>(mut self, value: &T) -> Result<Self> {
        self.payload = serde_json::to_string(value).map_err(Error::Payload)?;
        Ok(self)
    }

    /// Sets the payload from JSON text, which is checked here so the error names the payload rather than
    /// the server's CHECK constraint.
    pub fn payload_json(mut self, text: &str) -> Result<Self> {
        serde_json::from_str::<serde_json::Value>(text).map_err(Error::Payload)?;
        self.payload = text.to_string();
        Ok(self)
    }

    /// The queue (default `default`).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Priority: smaller runs first (default 0).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Due at this instant (default: now).
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(RunAt::At(at));
        self
    }

    /// Due this long after the insert, by the database's clock.
    pub fn run_in(mut self, delay: Duration) -> Self {
        self.run_at = Some(RunAt::After(delay));
        self
    }

    /// Attempts before the job is dead (default 20).
    pub fn max_attempts(mut self, n: u16) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Maximum run time of one attempt (default: the handler's, else the worker's), in whole seconds,
    /// rounded up.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout_secs = Some(crate::job::timeout_secs(t));
        self
    }

    /// A unique key: while a job of the same kind with this key is queued, waiting to retry or running,
    /// enqueueing another returns that job instead of inserting ([`enqueue_unique`] says which happened).
    /// Keys are unique within a kind (jobs of two kinds may hold the same key at once) and compared byte
    /// for byte; at most 255 bytes. Done, dead and cancelled jobs free it,
    /// unless [`unique_for`](Self::unique_for) says otherwise.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// Also return a done job with the same key if it finished less than `period` ago (by the database's
    /// clock), e.g. "at most one report per hour". This is a look-up (a locking read of the key's rows
    /// still in the table) before the insert, not a constraint: a job with the key that is enqueued,
    /// claimed and finished entirely between another enqueuer's look-up and its insert is not seen, and
    /// both run. A live job is never duplicated, period or not. Needs a unique key.
    pub fn unique_for(mut self, period: Duration) -> Self {
        self.unique_for = Some(period);
        self
    }

    fn validate(&self) -> Result<()> {
        Name::Kind.check(&self.kind)?;
        if self.after.len() > crate::db::deps::MAX_DEPENDENCIES {
            return Err(Error::invalid(
                "after",
                format!(
                    "{} jobs; a job waits for at most {}",
                    self.after.len(),
                    crate::db::deps::MAX_DEPENDENCIES
                ),
            ));
        }
        if self.after_ended
            && !serde_json::from_str::<serde_json::Value>(&self.payload)
                .is_ok_and(|v| v.is_object())
        {
            return Err(Error::invalid(
                "payload",
                "a batch callback's payload must be a JSON object (its members' outcome counts are added to it)",
            ));
        }
        if !self.after.is_empty() && self.unique_key.is_some() {
            return Err(Error::invalid(
                "after",
                "a job with a unique key cannot also wait for other jobs",
            ));
        }
        match (&self.unique_key, self.unique_for) {
            (Some(key), _) => check_unique_key(key)?,
            (None, Some(_)) => return Err(Error::invalid("unique_for", "needs a unique key")),
            (None, None) => {}
        }
        if self.unique_for == Some(Duration::ZERO) {
            return Err(Error::invalid("unique_for", "must be above zero"));
        }
        if let Some(q) = &self.queue {
            Name::Queue.check(q)?;
        }
        if self.max_attempts == Some(0) {
            return Err(Error::invalid("max_attempts", "must be at least 1"));
        }
        if self.timeout_secs == Some(0) {
            return Err(Error::invalid("timeout", "must be above zero"));
        }
        let due = match self.run_at {
            None => return Ok(()),
            Some(RunAt::At(t)) => t,
            Some(RunAt::After(d)) => chrono::Duration::from_std(d)
                .ok()
                .and_then(|d| Utc::now().checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        };
        // Out-of-range values would not be refused by the server: bound as a binary temporal value, MariaDB
        // silently stores the current time instead, and the job would run at once.
        if !(min_run_at()..=max_run_at()).contains(&due) {
            return Err(Error::invalid(
                "run_at",
                format!(
                    "{} is outside what the run_at column holds ({})",
                    due.format("%Y-%m-%d %H:%M:%S UTC"),
                    crate::job::timestamp_range_text(),
                ),
            ));
        }
        Ok(())
    }
}

fn min_run_at() -> DateTime<Utc> {
    crate::job::timestamp_bounds().0
}

fn max_run_at() -> DateTime<Utc> {
    crate::job::timestamp_bounds().1
}

/// The optional columns, in statement order. A column goes into the statement only when some row of the
/// batch sets it, and a row that does not set it gets the column's `DEFAULT`: the statement stays as
/// short as the application's own `INSERT INTO job_queue (kind, payload) VALUES …`.
#[derive(Debug, Clone, Copy)]
struct Columns {
    queue: bool,
    priority: bool,
    run_at: bool,
    max_attempts: bool,
    timeout_secs: bool,
    unique_key: bool,
}

impl Columns {
    fn of(jobs: &[NewJob]) -> Self {
        Self {
            queue: jobs.iter().any(|j| j.queue.is_some()),
            priority: jobs.iter().any(|j| j.priority.is_some()),
            run_at: jobs.iter().any(|j| j.run_at.is_some()),
            max_attempts: jobs.iter().any(|j| j.max_attempts.is_some()),
            timeout_secs: jobs.iter().any(|j| j.timeout_secs.is_some()),
            unique_key: jobs.iter().any(|j| j.unique_key.is_some()),
        }
    }

    fn names(self) -> String {
        let mut names = vec!["kind", "payload"];
        for (on, name) in [
            (self.queue, "queue"),
            (self.priority, "priority"),
            (self.run_at, "run_at"),
            (self.max_attempts, "max_attempts"),
            (self.timeout_secs, "timeout_secs"),
            (self.unique_key, "unique_key"),
        ] {
            if on {
                names.push(name);
            }
        }
        names.join(", ")
    }
}

fn push_value<T>(b: &mut sqlx::query_builder::Separated<'_, '_, MySql, &'static str>, v: Option<T>)
where
    T: for<'q> sqlx::Encode<'q, MySql> + sqlx::Type<MySql> + Send + 'static,
{
    match v {
        Some(v) => b.push_bind(v),
        None => b.push("DEFAULT"),
    };
}

fn push_row(
    mut b: sqlx::query_builder::Separated<'_, '_, MySql, &'static str>,
    job: &NewJob,
    cols: Columns,
) {
    b.push_bind(job.kind.clone());
    b.push_bind(job.payload.clone());
    if cols.queue {
        push_value(&mut b, job.queue.clone());
    }
    if cols.priority {
        push_value(&mut b, job.priority);
    }
    if cols.run_at {
        match job.run_at {
            None => b.push("DEFAULT"),
            Some(RunAt::At(t)) => b.push_bind(t),
            Some(RunAt::After(d)) => b
                .push("NOW(6) + INTERVAL ")
                .push_bind_unseparated(d.as_micros().min(i64::MAX as u128) as i64)
                .push_unseparated(" MICROSECOND"),
        };
    }
    if cols.max_attempts {
        push_value(&mut b, job.max_attempts);
    }
    if cols.timeout_secs {
        push_value(&mut b, job.timeout_secs);
    }
    if cols.unique_key {
        push_value(
            &mut b,
            job.unique_key.as_ref().map(|k| k.as_bytes().to_vec()),
        );
    }
}

/// `INSERT INTO job_queue …`, or `INSERT IGNORE` when `skip_duplicates`: only for rows that
/// [`NewJob::validate`] passed, because IGNORE also turns a value the column cannot hold into a warning.
fn insert_statement<'a>(jobs: &'a [NewJob], skip_duplicates: bool) -> QueryBuilder<'a, MySql> {
    let cols = Columns::of(jobs);
    let ignore = if skip_duplicates { " IGNORE" } else { "" };
    let mut q = QueryBuilder::new(format!("INSERT{ignore} INTO job_queue ({}) ", cols.names()));
    q.push_values(jobs, |b, job| push_row(b, job, cols));
    q
}

/// How many times a keyed enqueue is tried. A round ends without an answer when the holder left the
/// live states between the refusal and the look-up (it finished), or when the insert was chosen as a
/// deadlock victim: several inserts of one key wait on the holder's index entry while a worker's
/// finish rewrites it, and once it commits InnoDB lets one insert go and rolls back the others (seen
/// in tests/it/unique.rs under 8 enqueuers). Either would have to happen this many times in a row.
const ROUNDS: usize = 16;

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
async fn holder_within(
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

/// One round of [`enqueue_unique`] for a keyed job: the holder (live, or within the job's period), else
/// the insert, else (refused) the holder that won meanwhile. The refusal (1062) when that holder left
/// before the look-up.
///
/// The look-up comes before the insert, not only after a refusal, because a refused insert locks more:
/// its duplicate check holds a shared next-key lock on the holder's index entry, which covers the gap
/// before it, where the holder's own finish inserts its new (NULL) entry. Eight enqueuers inserting a
/// held key made a worker's finish and one of them deadlock again and again (an enqueue failed 16
/// rounds in a row); a locking read of an existing entry locks only that entry.
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
    crate::db::deps::wait_for(&mut tx, id, &job.after, job.after_ended).await?;
    tx.commit().await?;
    Ok(JobId(id))
}

async fn insert_or_find(
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

/// Inserts many jobs with multi-row INSERTs of up to 1,000 rows and returns how many were inserted. On a
/// connection or transaction the batches share its fate; on a pool each batch commits by itself.
///
/// A job with a [unique key](NewJob::unique_key) is skipped, not counted and not an error when a live
/// job holds the key, including an earlier job of the same call (the first of several with one key
/// wins), or, with [`unique_for`](NewJob::unique_for), a job done within its period (one look-up per
/// such job before its batch). Callers who need the ids of the jobs holding the keys use
/// [`enqueue_unique`] per job.
pub async fn enqueue_many(conn: &mut sqlx::MySqlConnection, jobs: &[NewJob]) -> Result<u64> {
    for job in jobs {
        job.validate()?;
        if !job.after.is_empty() {
            return Err(Error::invalid(
                "after",
                "enqueue_many takes no dependencies: enqueue a job that waits on its own",
            ));
        }
    }
    let mut n = 0;
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
            rows.push(job.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_at_must_fit_the_column() {
        let far = DateTime::from_timestamp(2_300_000_000, 0).unwrap();
        let e = NewJob::new("k")
            .run_at(far)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2042") && e.contains("2038-01-19 03:14:07"),
            "{e}"
        );
        assert!(NewJob::new("k").run_at(max_run_at()).validate().is_ok());
        let e = NewJob::new("k")
            .run_in(Duration::from_secs(20 * 366 * 86400))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        let before_1970 = DateTime::from_timestamp(-5, 0).unwrap();
        assert!(NewJob::new("k").run_at(before_1970).validate().is_err());
        let e = NewJob::new("k")
            .timeout(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("timeout"), "{e}");
        assert_eq!(
            NewJob::new("k")
                .timeout(Duration::from_millis(1500))
                .timeout_secs,
            Some(2)
        );
    }

    #[test]
    fn payload_text_is_checked() {
        let e = NewJob::new("k")
            .payload_json("{oops")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("payload is not valid JSON"), "{e}");
        assert!(NewJob::new("k").payload_json("[1,2]").is_ok());
    }
}
