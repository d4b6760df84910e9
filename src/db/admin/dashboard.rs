//! The cheap figures the dashboard and the reaper's gauges read on every refresh: each one a short
//! index range, bounded however long the history of finished jobs grows.

use sqlx::MySqlPool;

use crate::error::Result;
use crate::job::State;

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
/// an index (or, for done rows, of the primary key), which for a long history would be millions of
/// entries.
pub(crate) const COUNT_CAP: i64 = 100_000;

/// How many jobs are in one state, counted up to 100,000.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StateCount {
    /// The state.
    pub state: State,
    /// Jobs in it; at least this many when `capped`.
    pub count: i64,
    /// The count stopped at the cap (done: the table holds more than the newest ids it read).
    pub capped: bool,
}

/// Jobs per state, each counted up to [`COUNT_CAP`]: seven short ranges in one round trip, about
/// 40 ms per capped state whatever the table's size. Done rows are counted among the newest
/// [`DONE_WINDOW`](crate::db::gauges::DONE_WINDOW) ids, exact when those are the whole table.
pub(crate) async fn state_counts(pool: &MySqlPool) -> Result<Vec<StateCount>> {
    const STATES: [State; 7] = [
        State::Waiting,
        State::Queued,
        State::Running,
        State::Retry,
        State::Done,
        State::Dead,
        State::Cancelled,
    ];
    let (after, whole) = crate::db::gauges::done_window(pool).await?;
    let sql = STATES
        .iter()
        .map(|s| match (s, crate::db::gauges::by_state(*s)) {
            (_, Some((index, on))) => format!(
                "SELECT '{0}' AS state, COUNT(*) AS n FROM (SELECT 1 FROM job_queue \
                 FORCE INDEX ({index}) WHERE {on} = '{0}' LIMIT {1}) t",
                s.as_str(),
                COUNT_CAP + 1,
            ),
            // Running rows are the ones the claimants' holdings lists name.
            (State::Running, None) => format!(
                concat!(
                    "SELECT 'running' AS state, COUNT(*) AS n FROM (SELECT DISTINCT q.id \
                     FROM jobq_holdings h JOIN ",
                    crate::statements::listed_running!(),
                    " LIMIT {0}) t"
                ),
                COUNT_CAP + 1
            ),
            // Done rows: a range of the primary key, the newest ids.
            (_, None) => format!(
                "SELECT '{0}' AS state, COUNT(*) AS n FROM (SELECT 1 FROM job_queue \
                 WHERE id > {after} AND state = '{0}' LIMIT {1}) t",
                s.as_str(),
                COUNT_CAP + 1,
            ),
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
            let partial = *state == State::Done && !whole;
            StateCount {
                state: *state,
                count: n.min(COUNT_CAP),
                capped: n > COUNT_CAP || partial,
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

/// Every queue with waiting or running jobs. Reads the claim index (waiting rows only) and the rows the
/// claimants' holdings lists name: the cost follows the backlog, not the history.
pub(crate) async fn queue_summaries(pool: &MySqlPool) -> Result<Vec<QueueSummary>> {
    let ready: Vec<(Vec<u8>, i64, i64, Option<i64>)> = sqlx::query_as(
        "SELECT ready_queue, COUNT(*), CAST(COALESCE(SUM(run_at <= NOW(6)), 0) AS SIGNED), \
         TIMESTAMPDIFF(MICROSECOND, MIN(IF(run_at <= NOW(6), run_at, NULL)), NOW(6)) \
         FROM job_queue FORCE INDEX (claim_order) WHERE ready_queue IS NOT NULL GROUP BY ready_queue",
    )
    .fetch_all(pool)
    .await?;
    let running: Vec<(Vec<u8>, i64)> = sqlx::query_as(concat!(
        "SELECT CAST(q.queue AS BINARY), COUNT(DISTINCT q.id) FROM jobq_holdings h JOIN ",
        crate::statements::listed_running!(),
        " GROUP BY q.queue"
    ))
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

/// How long the longest-running job has run, in seconds (0 when none runs). Reads the rows the
/// claimants' holdings lists name.
pub(crate) async fn oldest_running_secs(pool: &MySqlPool) -> Result<f64> {
    let us: Option<i64> = sqlx::query_scalar(concat!(
        "SELECT \
         TIMESTAMPDIFF(MICROSECOND, MIN(COALESCE(q.started_at, q.claimed_at)), NOW(6)) \
         FROM jobq_holdings h JOIN ",
        crate::statements::listed_running!()
    ))
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
/// and the current minute. Done jobs from the counts the workers write (`jobq_done_minutes`), dead ones
/// from their rows through the `rare_state` index (their finished_at is its rare_at).
pub(crate) async fn finished_by_minute(
    pool: &MySqlPool,
    from: Option<i64>,
) -> Result<(i64, Vec<(i64, State, i64)>)> {
    let now: i64 = sqlx::query_scalar("SELECT CAST(FLOOR(UNIX_TIMESTAMP(NOW(6)) / 60) AS SIGNED)")
        .fetch_one(pool)
        .await?;
    let from = from.unwrap_or(now - 59).max(now - 59);
    let dead: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT CAST(FLOOR(UNIX_TIMESTAMP(finished_at) / 60) AS SIGNED) AS m, COUNT(*) \
         FROM job_queue FORCE INDEX (rare_state) \
         WHERE rare_state = 'dead' AND rare_at >= FROM_UNIXTIME(? * 60) GROUP BY m",
    )
    .bind(from)
    .fetch_all(pool)
    .await?;
    let done = crate::db::done_minutes::since(pool, from).await?;
    let counts = done
        .into_iter()
        .map(|(m, n)| (m, State::Done, n))
        .chain(dead.into_iter().map(|(m, n)| (m, State::Dead, n)))
        .collect();
    Ok((now, counts))
}
