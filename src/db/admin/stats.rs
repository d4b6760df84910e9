//! What `jobq stats` shows: counts, lag per queue and kind, the process registry, and which due jobs
//! no live worker will claim.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySqlPool, Row};

use crate::db::row::text;
use crate::error::Result;

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
    /// Paused queues (no worker claims from them).
    pub paused: Vec<crate::db::queues::PausedQueue>,
    /// Queues pinned to hosts.
    pub pins: Vec<crate::db::queues::QueuePin>,
    /// Concurrency and rate limits.
    pub limits: Vec<crate::db::limits::Limit>,
    /// Running jobs per queue and kind.
    pub running: Vec<RunningCount>,
    /// Stored worker counts of supervisors (`jobq scale`); a count of 0 keeps no workers there.
    pub scale: Vec<crate::db::scale::ScaleSetting>,
    /// Jobs that have waited for other jobs longer than a threshold.
    pub long_waiting: crate::db::deps::LongWaiting,
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

/// Running jobs of one queue and kind.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct RunningCount {
    /// The queue.
    pub queue: String,
    /// The kind.
    pub kind: String,
    /// Jobs running now.
    pub running: i64,
}

/// Running jobs per queue and kind: the rows the claimants' holdings lists name, one primary-key
/// lookup each, as many as jobs run.
pub(crate) async fn running_counts(pool: &MySqlPool) -> Result<Vec<RunningCount>> {
    Ok(sqlx::query_as(concat!(
        "SELECT CAST(q.queue AS CHAR) AS queue, CAST(q.kind AS CHAR) AS kind, \
         COUNT(DISTINCT q.id) AS running FROM jobq_holdings h JOIN ",
        crate::statements::listed_running!(),
        " GROUP BY q.queue, q.kind"
    ))
    .fetch_all(pool)
    .await?)
}

/// Queue statistics; jobs waiting for others longer than `long_wait` are counted.
pub(crate) async fn stats(pool: &MySqlPool, long_wait: std::time::Duration) -> Result<Stats> {
    let counts = sqlx::query_as(
        "SELECT queue, state, COUNT(*) AS count FROM job_queue \
         GROUP BY queue, state ORDER BY queue, state",
    )
    .fetch_all(pool)
    .await?;
    let lag = lag(pool).await?;
    let due_by_kind = due_by_kind(pool).await?;
    let processes = processes(pool).await?;
    let paused = crate::db::queues::paused(pool).await?;
    let pins = crate::db::queues::pins(pool).await?;
    let limits = crate::db::limits::all(pool).await?;
    let running = running_counts(pool).await?;
    let scale = crate::db::scale::all(pool).await?;
    let long_waiting = crate::db::deps::long_waiting(pool, long_wait).await?;
    Ok(Stats {
        counts,
        lag,
        due_by_kind,
        processes,
        paused,
        pins,
        limits,
        running,
        scale,
        long_waiting,
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
