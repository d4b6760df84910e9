//! What an idle worker sends between claims: a probe for due work, and the server-side wait that runs
//! the same probe inside `jobq_wait_for_work` (schema 6), so that an idle worker costs one statement per
//! wait yet starts a new job within a fraction of a second.

use crate::db::claim::this_host;
use crate::db::dedicated::Dedicated;
use crate::error::Result;
use crate::statements::EXACT_KIND;

/// A probe or a wait is retried this many times in all on a transient error; an idle worker tries
/// again at its next wait anyway.
const TRIES: u32 = 3;

/// True when at least one job of these queues and kinds is due in a queue that is not paused. One
/// indexed, non-locking query: this is all an idle worker sends between claims.
pub(crate) async fn any_due(
    conn: &mut Dedicated,
    queues: &[String],
    kinds: &[String],
) -> Result<bool> {
    let probe = format!("SELECT {}", due_expression(queues, kinds));
    let probe = probe.as_str();
    let found = conn
        .run("probe", TRIES, |mut c| async move {
            let r = sqlx::query_scalar::<_, i64>(probe).fetch_one(&mut c).await;
            (c, r)
        })
        .await?;
    Ok(found > 0)
}

/// 1 when a job of `kinds` is due in one of `queues` that is neither paused nor pinned to other hosts,
/// else 0: per queue, primary-key lookups in `jobq_queues` and `jobq_queue_hosts` and one dive per kind
/// into `due_kinds (ready_queue, kind, run_at)` (schema 32), all resolved as constants (a held queue's
/// range is never read). Not the claim index: there a queue full of due jobs of other kinds was read
/// to its end by every probe, twenty times per wait. Names are validated identifiers (no
/// quotes possible); quoting is doubled anyway. Literal, not bound: the text also runs inside
/// `jobq_wait_for_work`, which takes it as a string.
fn due_expression(queues: &[String], kinds: &[String]) -> String {
    let quote = |i: &String| format!("'{}'", i.replace('\'', "''"));
    let kinds = kinds.iter().map(quote).collect::<Vec<_>>().join(", ");
    // A host name as the token spells it: letters, digits, `.`, `-`, `_` (no quote possible).
    let host = quote(&this_host().to_string());
    let per_queue: Vec<String> = queues
        .iter()
        .map(|q| {
            let q = quote(q);
            format!(
                "(NOT EXISTS (SELECT 1 FROM jobq_queues WHERE name = {q}) AND (NOT EXISTS (SELECT 1 \
                 FROM jobq_queue_hosts WHERE queue = {q}) OR EXISTS (SELECT 1 FROM jobq_queue_hosts \
                 WHERE queue = {q} AND host = {host})) AND EXISTS (SELECT 1 FROM \
                 job_queue FORCE INDEX (due_kinds) WHERE ready_queue = {q} AND run_at <= NOW(6) \
                 AND kind IN ({kinds}){EXACT_KIND}))"
            )
        })
        .collect();
    if per_queue.is_empty() {
        return "CAST(0 AS SIGNED)".into();
    }
    format!("CAST(({}) AS SIGNED)", per_queue.join(" OR "))
}

/// Waits server-side (in `jobq_wait_for_work`, schema 6) up to `wait` for a due job of these queues and
/// kinds, refreshing `token`'s heartbeat first (`None`: no heartbeat; the procedure's UPDATE then
/// matches no row and writes nothing). One client statement however long it waits; returns as soon as
/// the server-side probe (every 1 to 100 ms, a twentieth of the wait) sees a due job in a queue that is
/// not paused.
pub(crate) async fn wait_for_work(
    conn: &mut Dedicated,
    token: Option<&str>,
    queues: &[String],
    kinds: &[String],
    wait: std::time::Duration,
) -> Result<bool> {
    let probe = format!("SELECT {} INTO @jobq_due", due_expression(queues, kinds));
    let wait_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    // Probe twenty times per wait, between every 1 ms (just after the last job, when more is likely to
    // come) and every 100 ms (long idle).
    let every_ms = (wait_ms / 20).clamp(1, 100);
    let probe = probe.as_str();
    let due: Option<i64> = conn
        .run("wait for work", TRIES, |mut c| async move {
            let r = sqlx::query_scalar("CALL jobq_wait_for_work(?, ?, ?, ?)")
                .bind(token)
                .bind(probe)
                .bind(wait_ms)
                .bind(every_ms)
                .fetch_optional(&mut c)
                .await;
            (c, r)
        })
        .await?;
    Ok(due.unwrap_or(0) > 0)
}
