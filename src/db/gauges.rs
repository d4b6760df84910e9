//! Jobs by queue and state, read by the dashboard's overview and by a reaper for the `jobq_queue_jobs`
//! gauge: a breakdown both need on every refresh, so it must cost the same on a table of a thousand
//! rows and of ten million.

use sqlx::MySqlPool;

use crate::error::Result;
use crate::job::State;

/// Each state's rows are counted up to this many. A state's stretch of the `finished (state,
/// finished_at)` index holds the row ids only, so finding each row's queue is a primary-key lookup:
/// 10,000 lookups take a few milliseconds, a million done rows would take seconds.
pub(crate) const QUEUE_COUNT_CAP: i64 = 10_000;

/// How many jobs of one queue are in one state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueStateCount {
    /// Queue name.
    pub queue: String,
    /// The state.
    pub state: State,
    /// Jobs of the queue in the state, among the state's rows counted.
    pub count: i64,
    /// The state had more rows than `QUEUE_COUNT_CAP`: the counts of this state cover its first
    /// rows only (the most recently finished ones for done, dead and cancelled).
    pub capped: bool,
}

/// Jobs per queue and state, each state's rows counted up to [`QUEUE_COUNT_CAP`] (finished states
/// newest first), in one round trip; ordered by queue, then state as [`State::ALL`] lists them.
pub(crate) async fn queue_state_counts(pool: &MySqlPool) -> Result<Vec<QueueStateCount>> {
    let sql = State::ALL
        .iter()
        .map(|s| {
            format!(
                "(SELECT '{0}' AS state, CAST(queue AS BINARY) AS queue, COUNT(*) AS n, \
                 (SELECT COUNT(*) FROM (SELECT 1 FROM job_queue FORCE INDEX (finished) \
                 WHERE state = '{0}' LIMIT {1}) c) AS seen \
                 FROM (SELECT queue FROM job_queue FORCE INDEX (finished) WHERE state = '{0}' \
                 ORDER BY finished_at DESC LIMIT {2}) t GROUP BY queue)",
                s.as_str(),
                QUEUE_COUNT_CAP + 1,
                QUEUE_COUNT_CAP
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let rows: Vec<(Vec<u8>, Vec<u8>, i64, i64)> = sqlx::query_as(&sql).fetch_all(pool).await?;
    let mut out = Vec::with_capacity(rows.len());
    for (state, queue, n, seen) in rows {
        out.push(QueueStateCount {
            queue: String::from_utf8_lossy(&queue).into_owned(),
            state: String::from_utf8_lossy(&state).parse()?,
            count: n,
            capped: seen > QUEUE_COUNT_CAP,
        });
    }
    out.sort_by(|a, b| {
        let rank = |s: State| State::ALL.iter().position(|x| *x == s);
        (&a.queue, rank(a.state)).cmp(&(&b.queue, rank(b.state)))
    });
    Ok(out)
}
