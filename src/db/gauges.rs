//! Jobs by queue and state, read by the dashboard's overview and by a reaper for the `jobq_queue_jobs`
//! gauge: a breakdown both need on every refresh, so it must cost the same on a table of a thousand
//! rows and of ten million.

use sqlx::MySqlPool;

use crate::error::Result;
use crate::job::State;

/// Finished and waiting states' rows are counted up to this many. A state's stretch of the `state_claim
/// (state, claim, finished_at)` or `rare_state (rare_state, finished_at)` index holds the row ids only,
/// so finding each row's queue is a primary-key lookup: 10,000 lookups take a few milliseconds, a
/// million done rows would take seconds.
pub(crate) const QUEUE_COUNT_CAP: i64 = 10_000;

/// Where the rows of `state` are found: the index that holds them (for `FORCE INDEX`), and the
/// condition that makes them a range of it, to be followed by `= ` and the state's name. Waiting,
/// retry, dead and cancelled rows through `rare_state` (schema 39, in finished_at order), queued rows
/// through the claim index (whose entries are the queued and retry rows), running and done rows through
/// `state_claim`.
pub(crate) fn by_state(state: State) -> (&'static str, &'static str) {
    match state {
        s if s.is_rare() => ("rare_state", "rare_state"),
        State::Queued => ("claim_order", "ready_queue IS NOT NULL AND state"),
        _ => ("state_claim", "state"),
    }
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
    /// (the most recently finished ones for done, dead and cancelled), and is shown as `N+`.
    pub capped: bool,
}

/// Jobs per queue and state, ordered by queue, then state as [`State::ALL`] lists them.
///
/// The states a backlog is made of are exact, whatever their size: `running` (the rows the claimants'
/// holdings lists name, one primary-key lookup each), and `queued` and `retry`, which are the rows of
/// the claim index (`ready_queue`), counted per queue from that index alone; `retry` is counted through
/// the `rare_state` index's retry rows, and `queued` is the rest. (Counting every state's first 10,000 rows, as before, showed a queue 0 queued beside 671
/// due once another queue held 10,000 queued rows.) `done`, `dead`, `cancelled` and `waiting` are
/// counted among their [`QUEUE_COUNT_CAP`] most recent rows, and marked `capped` past that. When
/// `retry` itself is capped, `queued` is marked capped too.
pub(crate) async fn queue_state_counts(pool: &MySqlPool) -> Result<Vec<QueueStateCount>> {
    const SAMPLED: [State; 5] = [
        State::Done,
        State::Dead,
        State::Cancelled,
        State::Waiting,
        State::Retry,
    ];
    let sampled = SAMPLED
        .iter()
        .map(|s| {
            let (index, on) = by_state(*s);
            format!(
                "(SELECT '{0}' AS state, CAST(queue AS BINARY) AS queue, COUNT(*) AS n, \
                 (SELECT COUNT(*) FROM (SELECT 1 FROM job_queue FORCE INDEX ({3}) \
                 WHERE {4} = '{0}' LIMIT {1}) c) AS seen \
                 FROM (SELECT queue FROM job_queue FORCE INDEX ({3}) WHERE {4} = '{0}' \
                 {5} ORDER BY finished_at DESC LIMIT {2}) t GROUP BY queue)",
                s.as_str(),
                QUEUE_COUNT_CAP + 1,
                QUEUE_COUNT_CAP,
                index,
                on,
                // Done rows carry no claim: one range of `state_claim`, in finished_at order.
                if s.is_rare() { "" } else { "AND claim IS NULL" },
            )
        })
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
