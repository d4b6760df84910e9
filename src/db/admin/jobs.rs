//! One job at a time, and lists of them: what an operator does to jobs (list, inspect, retry, run now,
//! delete, cancel).

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};

use crate::db::aging::unaged;
use crate::db::deps;
use crate::db::row::{opt_text, parsed, text};
use crate::error::{Error, Result};
use crate::job::{JobId, JobRecord, Progress, State};

const JOB_COLUMNS: &str = "id, queue, kind, payload, priority, base_priority, run_at, state, attempts, max_attempts, \
     timeout_secs, last_error, claim, claimed_at, created_at, started_at, finished_at, unique_key, \
     debounce_key, debounced, order_key, order_lanes, traceparent, CAST(progress AS DOUBLE) AS progress, progress_message, reported_attempt, reported_at";

/// Filters for [`Jobs::list`](crate::Jobs::list).
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only this state.
    pub state: Option<State>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only jobs whose last error contains this text.
    pub error_contains: Option<String>,
    /// Only jobs with a smaller id: the next page after a page whose last id this is (keyset paging,
    /// as fast on page 1,000 as on page 1).
    pub before: Option<JobId>,
    /// At most this many rows (newest first).
    pub limit: u32,
}

impl JobFilter {
    /// True when it names no state, queue, kind or error text: it matches every job (paging by
    /// `before` narrows a page, not the selection).
    pub fn is_unfiltered(&self) -> bool {
        self.state.is_none()
            && self.queue.is_none()
            && self.kind.is_none()
            && self.error_contains.is_none()
    }

    /// Its criteria in words, for errors and the audit trail: `state="dead" queue="mail"`, or
    /// `everything`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(s) = self.state {
            parts.push(format!("state={:?}", s.as_str()));
        }
        for (k, v) in [
            ("queue", &self.queue),
            ("kind", &self.kind),
            ("error", &self.error_contains),
        ] {
            if let Some(v) = v {
                parts.push(format!("{k}={v:?}"));
            }
        }
        if parts.is_empty() {
            "everything".into()
        } else {
            parts.join(" ")
        }
    }
}

/// `text` as a LIKE pattern matching itself anywhere: `%`, `_` and `\\` escaped.
fn contains_pattern(text: &str) -> String {
    let mut p = String::with_capacity(text.len() + 2);
    p.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// Jobs matching `filter`, newest first.
pub(crate) async fn list_jobs(pool: &MySqlPool, filter: &JobFilter) -> Result<Vec<JobRecord>> {
    Ok(filtered(JOB_COLUMNS, filter)
        .build_query_as()
        .fetch_all(pool)
        .await?)
}

/// The ids of the jobs matching `filter`, newest first: what a bulk action on a filter acts on.
pub(crate) async fn matching_ids(pool: &MySqlPool, filter: &JobFilter) -> Result<Vec<JobId>> {
    Ok(filtered("id", filter)
        .build_query_scalar()
        .fetch_all(pool)
        .await?)
}

/// `SELECT columns FROM job_queue WHERE <filter> ORDER BY id DESC LIMIT <filter.limit>`.
fn filtered<'a>(columns: &str, filter: &'a JobFilter) -> QueryBuilder<'a, MySql> {
    // Running jobs are the rows the claimants' holdings lists name, a few primary-key lookups
    // however large the table. A text search in another state with an index (`gauges::by_state`) reads
    // that state's rows through it: left to itself the server walks the primary key backwards hoping
    // for early matches, and with few matches reads the whole table (0.5 s at a million rows, against
    // 30 ms for ten thousand dead ones). Done rows are most of a table: for them the walk is the
    // cheaper plan (reaching a million rows through an index took 1.6 s).
    let through = filter
        .state
        .filter(|_| filter.error_contains.is_some())
        .and_then(crate::db::gauges::by_state);
    let hint = through.map_or(String::new(), |(index, _)| {
        format!(" FORCE INDEX ({index})")
    });
    let mut q =
        QueryBuilder::<MySql>::new(format!("SELECT {columns} FROM job_queue{hint} WHERE 1=1"));
    match filter.state {
        Some(State::Running) => {
            q.push(concat!(" AND ", crate::statements::listed_running_where!()));
        }
        Some(s) => {
            // With the hint, the condition that makes the state a range of its index.
            let on = through.map_or("state", |(_, on)| on);
            q.push(format!(" AND {on} = ")).push_bind(s.as_str());
        }
        None => {}
    }
    if let Some(queue) = &filter.queue {
        q.push(" AND queue = ").push_bind(queue.as_str());
    }
    if let Some(kind) = &filter.kind {
        q.push(" AND kind = ").push_bind(kind.as_str());
    }
    if let Some(text) = &filter.error_contains {
        q.push(" AND last_error LIKE ")
            .push_bind(contains_pattern(text));
    }
    if let Some(before) = filter.before {
        q.push(" AND id < ").push_bind(before);
    }
    q.push(" ORDER BY id DESC LIMIT ")
        .push_bind(filter.limit.max(1));
    q
}

/// One job by id.
pub(crate) async fn get_job(pool: &MySqlPool, id: JobId) -> Result<JobRecord> {
    sqlx::query_as(&format!("SELECT {JOB_COLUMNS} FROM job_queue WHERE id = ?"))
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or(Error::JobNotFound(id))
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for JobRecord {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            queue: text(row, "queue")?,
            kind: text(row, "kind")?,
            payload: text(row, "payload")?,
            priority: row.try_get("priority")?,
            base_priority: row.try_get("base_priority")?,
            run_at: row.try_get("run_at")?,
            state: parsed(row, "state")?,
            attempts: row.try_get("attempts")?,
            max_attempts: row.try_get("max_attempts")?,
            timeout_secs: row.try_get("timeout_secs")?,
            last_error: opt_text(row, "last_error")?,
            claim: opt_text(row, "claim")?,
            claimed_at: row.try_get("claimed_at")?,
            created_at: row.try_get("created_at")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            unique_key: row
                .try_get::<Option<Vec<u8>>, _>("unique_key")?
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            debounce_key: row
                .try_get::<Option<Vec<u8>>, _>("debounce_key")?
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            debounced: row.try_get("debounced")?,
            order_key: row
                .try_get::<Option<Vec<u8>>, _>("order_key")?
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            order_lanes: row.try_get("order_lanes")?,
            traceparent: opt_text(row, "traceparent")?,
            progress: match row.try_get::<Option<f64>, _>("progress")? {
                Some(percent) => Some(Progress {
                    percent,
                    message: opt_text(row, "progress_message")?,
                    attempt: row
                        .try_get::<Option<u16>, _>("reported_attempt")?
                        .unwrap_or(0),
                    at: row
                        .try_get::<Option<DateTime<Utc>>, _>("reported_at")?
                        .unwrap_or_default(),
                }),
                None => None,
            },
        })
    }
}

/// Makes a finished, dead, cancelled or waiting job runnable now, with a fresh attempt budget: `attempts`
/// starts again at 0, so the job gets its `max_attempts` again. (Adding one attempt to a dead job would
/// give an operator who fixed the cause a single try, and a second failure would leave it dead again.)
/// The attempts used so far are kept at the head of `last_error`, before the error they ended with.
///
/// A waiting job runs now without waiting any longer: its dependencies are forgotten.
pub(crate) async fn retry_job(pool: &MySqlPool, id: JobId) -> Result<()> {
    let mut tx = pool.begin().await?;
    // last_error is assigned before attempts: MySQL and MariaDB apply a single-table UPDATE's
    // assignments left to right, so it still sees the attempts being reset.
    let done = sqlx::query(concat!(
        "UPDATE job_queue SET state = 'queued', run_at = NOW(6), finished_at = NULL, \
         cancel_requested_at = NULL, claim = NULL, debounce_key = NULL, \
         last_error = IF(attempts > 0, \
           CONCAT('retried by operator after ', attempts, ' attempt(s); last error: ', \
                  COALESCE(last_error, '-')), \
           last_error), \
         attempts = 0, ",
        unaged!(),
        " WHERE id = ? AND state IN ('done', 'retry', 'dead', 'cancelled', 'waiting')"
    ))
    .bind(id)
    .execute(&mut *tx)
    .await;
    match done {
        Ok(done) if done.rows_affected() == 1 => {
            deps::forget(&mut tx, &[id.0]).await?;
            tx.commit().await?;
            return Ok(());
        }
        Ok(_) => {}
        Err(e) if crate::errno::is_duplicate_entry(&e) => {
            tx.rollback().await?;
            return Err(key_held(pool, id).await);
        }
        Err(e) => return Err(e.into()),
    }
    tx.rollback().await?;
    let job = get_job(pool, id).await?;
    Err(Error::JobState {
        id,
        state: job.state.to_string(),
        reason: match job.state {
            State::Queued => "it is already waiting to run",
            _ => "only done, retry, dead, cancelled and waiting jobs can be retried",
        },
    })
}

/// Why job `id` could not become live again: the live job of its kind that holds its unique key (the
/// UNIQUE index refused the change with 1062). Any failure to find out is returned as it is.
async fn key_held(pool: &MySqlPool, id: JobId) -> Error {
    /// The holder's id and state, the key, the kind.
    type Holder = (u64, Vec<u8>, Vec<u8>, Vec<u8>);
    let found: std::result::Result<Option<Holder>, sqlx::Error> = sqlx::query_as(
        "SELECT h.id, CAST(h.state AS BINARY), j.unique_key, CAST(j.kind AS BINARY) \
         FROM job_queue j JOIN job_queue h ON h.unique_live = j.unique_key AND h.kind = j.kind \
         WHERE j.id = ?",
    )
    .bind(id)
    .fetch_optional(pool)
    .await;
    let utf8 = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match found {
        Ok(Some((holder, state, key, kind))) => Error::UniqueKeyHeld {
            id,
            kind: utf8(&kind),
            key: utf8(&key),
            holder: JobId(holder),
            holder_state: utf8(&state),
        },
        // The holder ended between the refusal and the look-up: the retry may simply be tried again.
        Ok(None) => Error::JobState {
            id,
            state: "unchanged".into(),
            reason: "another job held its unique key a moment ago; try again",
        },
        Err(e) => e.into(),
    }
}

/// Makes a waiting job (`queued`, or `retry` waiting out its backoff) due now, without touching its
/// attempts. Returns false when it was already due.
///
/// # Errors
/// [`Error::JobState`] for a running or finished job (a finished one is run again with [`retry_job`]).
pub(crate) async fn run_job_now(pool: &MySqlPool, id: JobId) -> Result<bool> {
    // A stale token left on the row by a plain-SQL change is cleared too (the claim would overwrite
    // it anyway; the row should not look claimed while it waits).
    let done = sqlx::query(
        "UPDATE job_queue SET run_at = LEAST(run_at, NOW(6)), claim = NULL \
         WHERE id = ? AND state IN ('queued', 'retry') AND (run_at > NOW(6) OR claim IS NOT NULL)",
    )
    .bind(id)
    .execute(pool)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(true);
    }
    let job = get_job(pool, id).await?;
    match job.state {
        State::Queued | State::Retry => Ok(false),
        State::Running => Err(Error::JobState {
            id,
            state: job.state.to_string(),
            reason: "it is running already",
        }),
        State::Waiting => Err(Error::JobState {
            id,
            state: job.state.to_string(),
            reason: "it waits for other jobs; `jobq jobs retry` runs it now without waiting",
        }),
        _ => Err(Error::JobState {
            id,
            state: job.state.to_string(),
            reason: "only queued and retry jobs can be run now; `jobq jobs retry` runs a finished job again",
        }),
    }
}

/// Deletes a job that is not running (a running one is cancelled first, so its worker stops it). Its
/// own dependencies are forgotten, and the jobs that wait for it are cancelled (it will never end).
///
/// # Errors
/// [`Error::JobNotFound`], or [`Error::JobState`] for a running job.
pub(crate) async fn delete_job(pool: &MySqlPool, id: JobId) -> Result<()> {
    let mut tx = pool.begin().await?;
    let done = sqlx::query("DELETE FROM job_queue WHERE id = ? AND state <> 'running'")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    if done.rows_affected() == 1 {
        sqlx::query("DELETE FROM jobq_attempts WHERE job_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        deps::forget(&mut tx, &[id.0]).await?;
        deps::settle_dependents_of(&mut tx, &[id.0]).await?;
        tx.commit().await?;
        return Ok(());
    }
    tx.rollback().await?;
    let job = get_job(pool, id).await?;
    Err(Error::JobState {
        id,
        state: job.state.to_string(),
        reason: "a running job is cancelled first; delete it once it has stopped",
    })
}

/// What [`Jobs::cancel`](crate::Jobs::cancel) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job had not started; it is `cancelled` and will never run.
    Cancelled,
    /// The job is running: the worker running it was asked to stop it. The worker tells the handler
    /// (cancellation token; SIGTERM to a command), and the job ends `cancelled`, never retried. If the
    /// worker has died, the reaper ends it `cancelled`.
    Requested,
}

/// Cancels a job: at once if it has not started (queued, waiting to retry, or waiting for other jobs),
/// through its worker if it is running. The jobs waiting for one cancelled at once are settled with
/// it (cancelled, or a batch's callback released).
pub(crate) async fn cancel_job(pool: &MySqlPool, id: JobId) -> Result<CancelOutcome> {
    // The cancel settles the job's dependents in its transaction, which can deadlock with a worker or a
    // sweeper settling the same rows: the transaction is rolled back whole and tried again.
    let cancelled = crate::db::retry_transient("cancel", 8, || async {
        let mut tx = pool.begin().await?;
        let done = sqlx::query(
            "UPDATE job_queue SET state = 'cancelled', finished_at = NOW(6), claim = NULL, \
             last_error = COALESCE(last_error, 'cancelled by operator') \
             WHERE id = ? AND state IN ('queued', 'retry', 'waiting')",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        deps::forget(&mut tx, &[id.0]).await?;
        deps::settle_dependents_of(&mut tx, &[id.0]).await?;
        tx.commit().await?;
        Ok(true)
    })
    .await?;
    if cancelled {
        return Ok(CancelOutcome::Cancelled);
    }
    let requested = sqlx::query(
        "UPDATE job_queue SET cancel_requested_at = COALESCE(cancel_requested_at, NOW(6)) \
         WHERE id = ? AND state = 'running'",
    )
    .bind(id)
    .execute(pool)
    .await?;
    let job = get_job(pool, id).await?;
    if requested.rows_affected() == 1 || job.state == State::Running {
        return Ok(CancelOutcome::Requested);
    }
    Err(Error::JobState {
        id,
        state: job.state.to_string(),
        reason: "it has already finished",
    })
}
