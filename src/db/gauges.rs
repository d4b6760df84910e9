//! Jobs by queue and state, read by the dashboard's overview and by a reaper for the `jobq_queue_jobs`
//! gauge: a breakdown both need on every refresh, so it must cost the same on a table of a thousand
//! rows and of ten million.

use sqlx::MySqlPool;

use crate::error::Result;
use crate::job::State;

/// Finished and waiting states' rows are counted up to this many. A state's stretch of the
/// `rare_state (rare_state, rare_at)` index holds the row ids only, so finding each row's queue is
/// a primary-key lookup: 10,000 lookups take a few milliseconds, a million would take seconds.
pub(crate) const QUEUE_COUNT_CAP: i64 = 10_000;

/// Where the rows of `state` are found through an index: the index (for `FORCE INDEX`), and the
/// condition that makes them a range of it, to be followed by `= ` and the state's name. Waiting,
/// retry, dead and cancelled rows through `rare_state` (schema 39; in rare_at order, which is their
/// finished_at, since schema 42), queued rows through the claim index (whose entries are the queued and
/// retry rows). None for running rows, which the claimants' holdings lists name
/// (`statements::listed_running!`), and for done rows, which no index holds apart (a job's common path
/// moves no index entry when it ends: schema 41); see [`done_window`].
pub(crate) fn by_state(state: State) -> Option<(&'static str, &'static str)> {
    match state {
        s if s.is_rare() => Some(("rare_state", "rare_state")),
        State::Queued => Some(("claim_order", "ready_queue IS NOT NULL AND state")),
        _ => None,
    }
}

/// Done rows are counted among the newest this many ids. Done rows are most of a table with a
/// history, so the newest ids are mostly done ones, read in one primary-key range.
pub(crate) const DONE_WINDOW: u64 = 20_000;

/// The ids done rows are counted among: those above the first `u64`, the newest [`DONE_WINDOW`]; and
/// whether that takes in every row of the table (else a count of done rows is a lower bound).
pub(crate) async fn done_window(pool: &MySqlPool) -> Result<(u64, bool)> {
    let (min, max): (Option<u64>, Option<u64>) =
        sqlx::query_as("SELECT MIN(id), MAX(id) FROM job_queue")
            .fetch_one(pool)
            .await?;
    let after = max.unwrap_or(0).saturating_sub(DONE_WINDOW);
    Ok((after, min.is_none_or(|min| min > after)))
}

/// How many jobs of one queue are in one state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueStateCount {
    /// Queue name.
    pub queue: String,
    /// The state.
    pub state: State,
    /// Jobs of the queue in the state: exact unless `capped`, then at least this many.
    pub count: i64,
    /// The state had more rows than `QUEUE_COUNT_CAP`: the count covers the state's first rows only
    /// (the most recently finished ones for dead and cancelled, the newest for done), and is shown
    /// as `N+`.
    pub capped: bool,
}

/// Jobs per queue and state, ordered by queue, then state as [`State::ALL`] lists them.
///
/// The states a backlog is made of are exact, whatever their size: `running` (the rows the claimants'
/// holdings lists name, one primary-key lookup each), and `queued` and `retry`, which are the rows of
/// the claim index (`ready_queue`), counted per queue from that index alone; `retry` is counted through
/// the `rare_state` index's retry rows, and `queued` is the rest. (Counting every state's first 10,000
/// rows, as before, showed a queue 0 queued beside 671 due once another queue held 10,000 queued rows.)
/// `dead`, `cancelled` and `waiting` are counted among their [`QUEUE_COUNT_CAP`] most recent rows,
/// `done` among the newest [`QUEUE_COUNT_CAP`] done rows of the newest [`DONE_WINDOW`] ids, and marked
/// `capped` past that. When `retry` itself is capped, `queued` is marked capped too.
pub(crate) async fn queue_state_counts(pool: &MySqlPool) -> Result<Vec<QueueStateCount>> {
    const SAMPLED: [State; 4] = [State::Dead, State::Cancelled, State::Waiting, State::Retry];
    let (after, whole) = done_window(pool).await?;
    let done = format!(
        "(SELECT 'done' AS state, CAST(queue AS BINARY) AS queue, COUNT(*) AS n, {seen} AS seen \
         FROM (SELECT queue FROM job_queue WHERE id > {after} AND state = 'done' \
         ORDER BY id DESC LIMIT {cap}) t GROUP BY queue)",
        cap = QUEUE_COUNT_CAP,
        // Past the window the count is a lower bound: said so as if capped.
        seen = if whole {
            format!(
                "(SELECT COUNT(*) FROM (SELECT 1 FROM job_queue WHERE id > {after} \
                 AND state = 'done' LIMIT {}) c)",
                QUEUE_COUNT_CAP + 1
            )
        } else {
            (QUEUE_COUNT_CAP + 1).to_string()
        },
    );
    let sampled = SAMPLED
        .iter()
        .map(|s| {
            let (index, on) = by_state(*s).expect("the sampled states have an index");
            format!(
                "(SELECT '{0}' AS state, CAST(queue AS BINARY) AS queue, COUNT(*) AS n, \
                 (SELECT COUNT(*) FROM (SELECT 1 FROM job_queue FORCE INDEX ({3}) \
                 WHERE {4} = '{0}' LIMIT {1}) c) AS seen \
                 FROM (SELECT queue FROM job_queue FORCE INDEX ({3}) WHERE {4} = '{0}' \
                 ORDER BY rare_at DESC LIMIT {2}) t GROUP BY queue)",
                s.as_str(),
                QUEUE_COUNT_CAP + 1,
                QUEUE_COUNT_CAP,
                index,
                on,
            )
        })
        .chain(std::iter::once(done))
        .chain([
            concat!(
                "(SELECT 'running', CAST(q.queue AS BINARY), COUNT(DISTINCT q.id), 0 \
                 FROM jobq_holdings h JOIN ",
                crate::statements::listed_running!(),
                " GROUP BY q.queue)"
            )
            .to_string(),
            // Queued and retry together: every entry of the claim index, read from the index alone.
            "(SELECT 'claimable', CAST(ready_queue AS BINARY), COUNT(*), 0 FROM job_queue \
             FORCE INDEX (claim_order) WHERE ready_queue IS NOT NULL GROUP BY ready_queue)"
                .to_string(),
        ])
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let rows: Vec<(Vec<u8>, Vec<u8>, i64, i64)> = sqlx::query_as(&sampled).fetch_all(pool).await?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let retry_capped = rows
        .iter()
        .any(|(s, _, _, seen)| s == b"retry" && *seen > QUEUE_COUNT_CAP);
    let mut out = Vec::with_capacity(rows.len());
    for (state, queue, n, seen) in &rows {
        let queue = text(queue);
        if state == b"claimable" {
            let retry: i64 = rows
                .iter()
                .filter(|(s, q, _, _)| s == b"retry" && text(q) == queue)
                .map(|(_, _, n, _)| n)
                .sum();
            if *n > retry {
                out.push(QueueStateCount {
                    queue,
                    state: State::Queued,
                    count: n - retry,
                    capped: retry_capped,
                });
            }
            continue;
        }
        out.push(QueueStateCount {
            queue,
            state: text(state).parse()?,
            count: *n,
            capped: *seen > QUEUE_COUNT_CAP,
        });
    }
    out.sort_by(|a, b| {
        let rank = |s: State| State::ALL.iter().position(|x| *x == s);
        (&a.queue, rank(a.state)).cmp(&(&b.queue, rank(b.state)))
    });
    Ok(out)
}
