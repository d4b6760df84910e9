//! Operator queries: listing, inspecting, retrying and cancelling jobs, and queue statistics.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};

use crate::db::row::{opt_text, parsed, text};

use crate::error::{Error, Result};
use crate::job::{JobId, JobRecord, State};

const JOB_COLUMNS: &str = "id, queue, kind, payload, priority, run_at, state, attempts, max_attempts, \
     timeout_secs, last_error, claim, claimed_at, created_at, started_at, finished_at";

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
    // A text search in a state other than done reads that state's rows through the `finished (state,
    // …)` index: left to itself the server walks the primary key backwards hoping for early matches,
    // and with few matches reads the whole table (0.5 s at a million rows, against 30 ms for ten
    // thousand dead ones). Done rows are most of a table: for them the walk is the cheaper plan
    // (reaching a million rows through the index took 1.6 s).
    let hint = if filter.state.is_some_and(|s| s != State::Done) && filter.error_contains.is_some()
    {
        " FORCE INDEX (finished)"
    } else {
        ""
    };
    let mut q =
        QueryBuilder::<MySql>::new(format!("SELECT {columns} FROM job_queue{hint} WHERE 1=1"));
    if let Some(s) = filter.state {
        q.push(" AND state = ").push_bind(s.as_str());
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
        })
    }
}

/// Makes a finished, dead, cancelled or waiting job runnable now, with a fresh attempt budget: `attempts`
/// starts again at 0, so the job gets its `max_attempts` again. (Adding one attempt to a dead job would
/// give an operator who fixed the cause a single try, and a second failure would leave it dead again.)
/// The attempts used so far are kept at the head of `last_error`, before the error they ended with.
pub(crate) async fn retry_job(pool: &MySqlPool, id: JobId) -> Result<()> {
    // last_error is assigned before attempts: MySQL and MariaDB apply a single-table UPDATE's
    // assignments left to right, so it still sees the attempts being reset.
    let done = sqlx::query(
        "UPDATE job_queue SET state = 'queued', run_at = NOW(6), finished_at = NULL, \
         cancel_requested_at = NULL, \
         last_error = IF(attempts > 0, \
           CONCAT('retried by operator after ', attempts, ' attempt(s); last error: ', \
                  COALESCE(last_error, '-')), \
           last_error), \
         attempts = 0 \
         WHERE id = ? AND state IN ('done', 'retry', 'dead', 'cancelled')",
    )
    .bind(id)
    .execute(pool)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(());
    }
    let job = get_job(pool, id).await?;
    Err(Error::JobState {
        id,
        state: job.state.to_string(),
        reason: match job.state {
            State::Queued => "it is already waiting to run",
            _ => "only done, retry, dead and cancelled jobs can be retried",
        },
    })
}

/// Makes a waiting job (`queued`, or `retry` waiting out its backoff) due now, without touching its
/// attempts. Returns false when it was already due.
///
/// # Errors
/// [`Error::JobState`] for a running or finished job (a finished one is run again with [`retry_job`]).
pub(crate) async fn run_job_now(pool: &MySqlPool, id: JobId) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE job_queue SET run_at = NOW(6) \
         WHERE id = ? AND state IN ('queued', 'retry') AND run_at > NOW(6)",
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
        _ => Err(Error::JobState {
            id,
            state: job.state.to_string(),
            reason: "only queued and retry jobs can be run now; `jobq jobs retry` runs a finished job again",
        }),
    }
}

/// Deletes a job that is not running (a running one is cancelled first, so its worker stops it).
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

/// Jobs that ended in one minute of the last hour.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MinuteCount {
    /// Minutes ago: 0 is the minute now under way, 59 the oldest.
    pub minutes_ago: u8,
    /// Jobs that ended done.
    pub done: i64,
    /// Jobs that ended dead.
    pub dead: i64,
}

/// Done and dead jobs per minute over the last hour (the current minute last), every minute present.
pub(crate) async fn last_hour(pool: &MySqlPool) -> Result<Vec<MinuteCount>> {
    let (now, counts) = finished_by_minute(pool, None).await?;
    Ok(per_minute(now, &counts))
}

/// The sixty minutes up to minute `now`, oldest first, from `(minute, state, count)` rows; rows
/// outside them are ignored.
pub(crate) fn per_minute(now: i64, counts: &[(i64, State, i64)]) -> Vec<MinuteCount> {
    let mut minutes: Vec<MinuteCount> = (0..60u8)
        .rev()
        .map(|ago| MinuteCount {
            minutes_ago: ago,
            done: 0,
            dead: 0,
        })
        .collect();
    for (m, state, n) in counts {
        let ago = now - m;
        if !(0..60).contains(&ago) {
            continue;
        }
        let slot = &mut minutes[59 - ago as usize];
        if *state == State::Dead {
            slot.dead += n;
        } else {
            slot.done += n;
        }
    }
    minutes
}

/// Counts above this are reported as "at least this many": counting a state's rows reads its stretch of
/// the `finished (state, …)` index, which for a long history of done jobs would be millions of entries.
pub(crate) const COUNT_CAP: i64 = 100_000;

/// How many jobs are in one state, counted up to 100,000.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StateCount {
    /// The state.
    pub state: State,
    /// Jobs in it; at least this many when `capped`.
    pub count: i64,
    /// The count stopped at the cap.
    pub capped: bool,
}

/// Jobs per state, each counted up to [`COUNT_CAP`]: six short index ranges in one round trip, about
/// 40 ms per capped state whatever the table's size.
pub(crate) async fn state_counts(pool: &MySqlPool) -> Result<Vec<StateCount>> {
    const STATES: [State; 6] = [
        State::Queued,
        State::Running,
        State::Retry,
        State::Done,
        State::Dead,
        State::Cancelled,
    ];
    let sql = STATES
        .iter()
        .map(|s| {
            format!(
                "SELECT '{0}' AS state, COUNT(*) AS n FROM (SELECT 1 FROM job_queue FORCE INDEX (finished) \
                 WHERE state = '{0}' LIMIT {1}) t",
                s.as_str(),
                COUNT_CAP + 1
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let rows: Vec<(Vec<u8>, i64)> = sqlx::query_as(&sql).fetch_all(pool).await?;
    Ok(STATES
        .iter()
        .map(|state| {
            let n = rows
                .iter()
                .find(|(name, _)| name == state.as_str().as_bytes())
                .map_or(0, |(_, n)| *n);
            StateCount {
                state: *state,
                count: n.min(COUNT_CAP),
                capped: n > COUNT_CAP,
            }
        })
        .collect())
}

/// One queue's work: waiting, due, the oldest due job's wait, running.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueueSummary {
    /// Queue name.
    pub queue: String,
    /// Queued and retry jobs, due or not.
    pub waiting: i64,
    /// Of those, the due ones.
    pub due: i64,
    /// How long the oldest due job has waited, in seconds (None when nothing is due).
    pub oldest_due_secs: Option<f64>,
    /// Running jobs.
    pub running: i64,
}

/// Every queue with waiting or running jobs. Reads the claim index (waiting rows only) and the running
/// stretch of the `finished` index: the cost follows the backlog, not the history.
pub(crate) async fn queue_summaries(pool: &MySqlPool) -> Result<Vec<QueueSummary>> {
    let ready: Vec<(Vec<u8>, i64, i64, Option<i64>)> = sqlx::query_as(
        "SELECT ready_queue, COUNT(*), CAST(COALESCE(SUM(run_at <= NOW(6)), 0) AS SIGNED), \
         TIMESTAMPDIFF(MICROSECOND, MIN(IF(run_at <= NOW(6), run_at, NULL)), NOW(6)) \
         FROM job_queue FORCE INDEX (claim_order) WHERE ready_queue IS NOT NULL GROUP BY ready_queue",
    )
    .fetch_all(pool)
    .await?;
    let running: Vec<(Vec<u8>, i64)> = sqlx::query_as(
        "SELECT CAST(queue AS BINARY), COUNT(*) FROM job_queue FORCE INDEX (finished) \
         WHERE state = 'running' GROUP BY queue",
    )
    .fetch_all(pool)
    .await?;
    let name = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut out: Vec<QueueSummary> = ready
        .iter()
        .map(|(q, waiting, due, oldest)| QueueSummary {
            queue: name(q),
            waiting: *waiting,
            due: *due,
            oldest_due_secs: oldest.map(|us| us.max(0) as f64 / 1e6),
            running: 0,
        })
        .collect();
    for (q, n) in running {
        let q = name(&q);
        match out.iter_mut().find(|s| s.queue == q) {
            Some(s) => s.running = n,
            None => out.push(QueueSummary {
                queue: q,
                waiting: 0,
                due: 0,
                oldest_due_secs: None,
                running: n,
            }),
        }
    }
    out.sort_by(|a, b| a.queue.cmp(&b.queue));
    Ok(out)
}

/// Schedules per state (a small table).
pub(crate) async fn schedules_by_state(pool: &MySqlPool) -> Result<Vec<(String, i64)>> {
    let rows: Vec<(Vec<u8>, i64)> =
        sqlx::query_as("SELECT CAST(state AS BINARY), COUNT(*) FROM jobq_schedules GROUP BY state")
            .fetch_all(pool)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(s, n)| (String::from_utf8_lossy(&s).into_owned(), n))
        .collect())
}

/// How long the longest-running job has run, in seconds (0 when none runs). Reads the running stretch
/// of the `finished` index.
pub(crate) async fn oldest_running_secs(pool: &MySqlPool) -> Result<f64> {
    let us: Option<i64> = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(COALESCE(started_at, claimed_at)), NOW(6)) \
         FROM job_queue FORCE INDEX (finished) WHERE state = 'running'",
    )
    .fetch_one(pool)
    .await?;
    Ok(us.unwrap_or(0).max(0) as f64 / 1e6)
}

/// InnoDB's history list length, or None when this user may not read INNODB_METRICS (it needs the
/// PROCESS privilege on MariaDB and MySQL) or the server has no such counter.
pub(crate) async fn history_length(pool: &MySqlPool) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT CAST(`COUNT` AS SIGNED) FROM information_schema.INNODB_METRICS \
         WHERE NAME = 'trx_rseg_history_len'",
    )
    .fetch_optional(pool)
    .await
    .ok()
    .flatten()
}

/// Done and dead jobs per minute (minutes since the epoch, by the database clock) from minute `from` on,
/// and the current minute. Reads the `finished` index only.
pub(crate) async fn finished_by_minute(
    pool: &MySqlPool,
    from: Option<i64>,
) -> Result<(i64, Vec<(i64, State, i64)>)> {
    let now: i64 = sqlx::query_scalar("SELECT CAST(FLOOR(UNIX_TIMESTAMP(NOW(6)) / 60) AS SIGNED)")
        .fetch_one(pool)
        .await?;
    let from = from.unwrap_or(now - 59).max(now - 59);
    let rows: Vec<(i64, Vec<u8>, i64)> = sqlx::query_as(
        "SELECT CAST(FLOOR(UNIX_TIMESTAMP(finished_at) / 60) AS SIGNED) AS m, CAST(state AS BINARY), \
         COUNT(*) FROM job_queue FORCE INDEX (finished) \
         WHERE state IN ('done', 'dead') AND finished_at >= FROM_UNIXTIME(? * 60) GROUP BY m, state",
    )
    .bind(from)
    .fetch_all(pool)
    .await?;
    let counts = rows
        .into_iter()
        .map(|(m, state, n)| {
            let state = if state == b"dead" {
                State::Dead
            } else {
                State::Done
            };
            (m, state, n)
        })
        .collect();
    Ok((now, counts))
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

/// Cancels a job: at once if it has not started, through its worker if it is running.
pub(crate) async fn cancel_job(pool: &MySqlPool, id: JobId) -> Result<CancelOutcome> {
    let done = sqlx::query(
        "UPDATE job_queue SET state = 'cancelled', finished_at = NOW(6), \
         last_error = COALESCE(last_error, 'cancelled by operator') \
         WHERE id = ? AND state IN ('queued', 'retry')",
    )
    .bind(id)
    .execute(pool)
    .await?;
    if done.rows_affected() == 1 {
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

/// Count of jobs in one queue and state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueCount {
    /// Queue name.
    pub queue: String,
    /// State.
    pub state: String,
    /// Number of jobs.
    pub count: i64,
}

/// The oldest due job of a queue.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueueLag {
    /// Queue name.
    pub queue: String,
    /// Jobs due now.
    pub due: i64,
    /// How long the oldest due job has waited, in seconds.
    pub oldest_due_secs: f64,
}

/// Due jobs of one kind in one queue. Kinds are told apart byte for byte: `"quick "` (a trailing space)
/// is its own line, not folded into `quick` as the column's PAD SPACE collation would.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KindLag {
    /// Queue name.
    pub queue: String,
    /// The kind exactly as stored.
    pub kind: String,
    /// Jobs due now.
    pub due: i64,
    /// How long the oldest due job of this kind has waited, in seconds.
    pub oldest_due_secs: f64,
}

impl KindLag {
    /// True when no worker can ever claim these jobs: the kind is not a valid kind name (workers claim
    /// exact kind names only, and a handler's kind is always valid).
    pub fn unclaimable(&self) -> bool {
        crate::name::Name::Kind.check(&self.kind).is_err()
    }
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for KindLag {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            queue: text(row, "queue")?,
            kind: text(row, "kind")?,
            due: row.try_get("due")?,
            oldest_due_secs: row.try_get("oldest_due_secs")?,
        })
    }
}

/// A row of the process registry.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessRow {
    /// Claim token.
    pub token: String,
    /// worker, reaper, supervisor or scheduler.
    pub role: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Its database session (`CONNECTION_ID()` of its anchor session), as of its last heartbeat.
    pub connection_id: u64,
    /// Queues it serves (workers).
    pub queues: String,
    /// Kinds it has handlers for (workers of schema 7 and later; `None` when not known).
    pub kinds: Option<String>,
    /// jobq version.
    pub version: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub heartbeat_at: DateTime<Utc>,
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for QueueCount {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            queue: text(row, "queue")?,
            state: text(row, "state")?,
            count: row.try_get("count")?,
        })
    }
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for QueueLag {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            queue: text(row, "queue")?,
            due: row.try_get("due")?,
            oldest_due_secs: row.try_get("oldest_due_secs")?,
        })
    }
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for ProcessRow {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            token: text(row, "token")?,
            role: text(row, "role")?,
            host: text(row, "host")?,
            pid: row.try_get("pid")?,
            connection_id: row.try_get("connection_id")?,
            queues: text(row, "queues")?,
            kinds: row
                .try_get::<Option<Vec<u8>>, _>("kinds")?
                .map(|k| String::from_utf8_lossy(&k).into_owned()),
            version: text(row, "version")?,
            started_at: row.try_get("started_at")?,
            heartbeat_at: row.try_get("heartbeat_at")?,
        })
    }
}

/// Everything `jobq stats` shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    /// Jobs per queue and state.
    pub counts: Vec<QueueCount>,
    /// Due jobs and their wait per queue.
    pub lag: Vec<QueueLag>,
    /// Due jobs and their wait per queue and exact kind.
    pub due_by_kind: Vec<KindLag>,
    /// Registered processes.
    pub processes: Vec<ProcessRow>,
}

impl Stats {
    /// The groups of due jobs that no live worker will claim, and why, judged by the registry (workers of
    /// older versions registered no kinds and count as serving every kind of their queues).
    pub fn unserved(&self) -> Vec<(&KindLag, Unserved)> {
        unserved(&self.due_by_kind, &self.processes)
    }
}

/// Due jobs per queue and exact kind, with the wait of the oldest.
pub(crate) async fn due_by_kind(pool: &MySqlPool) -> Result<Vec<KindLag>> {
    // GROUP BY the kind's bytes: grouping by the column would merge 'quick ' into 'quick' (PAD SPACE),
    // hiding exactly the rows this line is for.
    Ok(sqlx::query_as(
        "SELECT ready_queue AS queue, CAST(kind AS BINARY) AS kind, COUNT(*) AS due, \
         CAST(TIMESTAMPDIFF(MICROSECOND, MIN(run_at), NOW(6)) / 1e6 AS DOUBLE) AS oldest_due_secs \
         FROM job_queue FORCE INDEX (claim_order) \
         WHERE ready_queue IS NOT NULL AND run_at <= NOW(6) \
         GROUP BY ready_queue, CAST(kind AS BINARY) ORDER BY ready_queue, CAST(kind AS BINARY)",
    )
    .fetch_all(pool)
    .await?)
}

/// Registered processes.
pub(crate) async fn processes(pool: &MySqlPool) -> Result<Vec<ProcessRow>> {
    Ok(sqlx::query_as(
        "SELECT token, role, host, pid, connection_id, queues, kinds, version, started_at, \
         heartbeat_at FROM jobq_processes ORDER BY role, started_at",
    )
    .fetch_all(pool)
    .await?)
}

/// Why no live worker will claim a group of due jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unserved {
    /// The kind is not a valid kind name (a trailing space, say): no worker ever matches it.
    InvalidKind,
    /// No live worker claims from the queue.
    NoWorkerOnQueue,
    /// Live workers claim from the queue, and every one of them registered its kinds, but none has
    /// a handler for this kind.
    NoHandler,
}

impl std::fmt::Display for Unserved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::InvalidKind => "the kind is not a valid kind name, so no worker ever claims it",
            Self::NoWorkerOnQueue => "no live worker claims from this queue",
            Self::NoHandler => "no live worker of this queue has a handler for this kind",
        })
    }
}

/// Which groups of due jobs no live worker will claim, judged by the registry: a pure decision, used
/// by `jobq stats` and the reaper. Workers of older versions registered no kinds and count as serving
/// every kind of their queues.
pub(crate) fn unserved<'a>(
    due: &'a [KindLag],
    processes: &[ProcessRow],
) -> Vec<(&'a KindLag, Unserved)> {
    let workers: Vec<&ProcessRow> = processes.iter().filter(|p| p.role == "worker").collect();
    due.iter()
        .filter_map(|k| {
            if k.unclaimable() {
                return Some((k, Unserved::InvalidKind));
            }
            let on_queue: Vec<&&ProcessRow> = workers
                .iter()
                .filter(|w| w.queues.split(',').any(|q| q == k.queue))
                .collect();
            if on_queue.is_empty() {
                return Some((k, Unserved::NoWorkerOnQueue));
            }
            let handled = on_queue.iter().any(|w| {
                w.kinds
                    .as_ref()
                    .is_none_or(|kinds| kinds.split(',').any(|x| x == k.kind))
            });
            (!handled).then_some((k, Unserved::NoHandler))
        })
        .collect()
}

/// Due jobs per queue and the wait of the oldest: a walk of the claim index over due rows only, cheap
/// however many finished rows the table holds.
pub(crate) async fn lag(pool: &MySqlPool) -> Result<Vec<QueueLag>> {
    Ok(sqlx::query_as(
        "SELECT ready_queue AS queue, COUNT(*) AS due, \
         CAST(TIMESTAMPDIFF(MICROSECOND, MIN(run_at), NOW(6)) / 1e6 AS DOUBLE) AS oldest_due_secs \
         FROM job_queue FORCE INDEX (claim_order) \
         WHERE ready_queue IS NOT NULL AND run_at <= NOW(6) GROUP BY ready_queue ORDER BY ready_queue",
    )
    .fetch_all(pool)
    .await?)
}

/// Queue statistics.
pub(crate) async fn stats(pool: &MySqlPool) -> Result<Stats> {
    let counts = sqlx::query_as(
        "SELECT queue, state, COUNT(*) AS count FROM job_queue \
         GROUP BY queue, state ORDER BY queue, state",
    )
    .fetch_all(pool)
    .await?;
    let lag = lag(pool).await?;
    let due_by_kind = due_by_kind(pool).await?;
    let processes = processes(pool).await?;
    Ok(Stats {
        counts,
        lag,
        due_by_kind,
        processes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(queue: &str, kind: &str) -> KindLag {
        KindLag {
            queue: queue.into(),
            kind: kind.into(),
            due: 1,
            oldest_due_secs: 600.0,
        }
    }

    fn worker(queues: &str, kinds: Option<&str>) -> ProcessRow {
        ProcessRow {
            token: "t".into(),
            role: "worker".into(),
            host: "h".into(),
            pid: 1,
            connection_id: 9,
            queues: queues.into(),
            kinds: kinds.map(Into::into),
            version: "v".into(),
            started_at: chrono::Utc::now(),
            heartbeat_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn unserved_groups_are_told_apart_by_reason() {
        let groups = [
            due("default", "x"),
            due("default", "orphan"),
            due("other", "x"),
            due("default", "x "),
        ];
        let workers = [worker("default", Some("x,w"))];
        let got: Vec<(&str, &str, Unserved)> = unserved(&groups, &workers)
            .into_iter()
            .map(|(k, why)| (k.queue.as_str(), k.kind.as_str(), why))
            .collect();
        assert_eq!(
            got,
            [
                ("default", "orphan", Unserved::NoHandler),
                ("other", "x", Unserved::NoWorkerOnQueue),
                ("default", "x ", Unserved::InvalidKind),
            ]
        );
    }

    #[test]
    fn a_worker_that_registered_no_kinds_serves_every_kind_of_its_queues() {
        let groups = [due("default", "anything")];
        assert!(unserved(&groups, &[worker("default", None)]).is_empty());
        let reaper = ProcessRow {
            role: "reaper".into(),
            ..worker("default", None)
        };
        assert_eq!(unserved(&groups, &[reaper]).len(), 1, "only workers serve");
    }
}
