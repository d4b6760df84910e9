//! Global limits (schema 14): `jobq_limits`, one row per limit on a kind or queue: how many run at once
//! (`per_secs` 0) or how many start per period; and `jobq_limit_starts` (schema 18), the starts a rate
//! limit counted within its last period. The claim under limits lives in [`super::claim`]; this file
//! keeps what it reads and writes of these tables, and their other statements.

use std::time::Duration;

use sqlx::{MySqlConnection, MySqlPool};

use crate::error::Result;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitScope {
    /// Jobs of one kind, in any queue.
    Kind,
    /// Jobs of one queue, of any kind.
    Queue,
}

impl LimitScope {
    /// The stored spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LimitScope::Kind => "kind",
            LimitScope::Queue => "queue",
        }
    }

    fn parse(s: &str) -> Option<LimitScope> {
        match s {
            "kind" => Some(LimitScope::Kind),
            "queue" => Some(LimitScope::Queue),
            _ => None,
        }
    }
}

/// Which limit: on what, and over which period (0: at once).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LimitKey {
    pub(crate) scope: LimitScope,
    pub(crate) name: String,
    pub(crate) per_secs: u32,
}

/// A stored limit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Limit {
    /// What it counts.
    pub scope: LimitScope,
    /// The kind or queue.
    pub name: String,
    /// `None`: at most `max_jobs` run at once. `Some(p)`: at most `max_jobs` start per `p`.
    #[serde(rename = "per_secs", serialize_with = "secs")]
    pub per: Option<Duration>,
    /// The most jobs at once, or per period; 0 holds them.
    pub max_jobs: u32,
    /// When it was set.
    pub set_at: chrono::DateTime<chrono::Utc>,
    /// Who set it.
    pub set_by: String,
}

fn secs<S: serde::Serializer>(per: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match per {
        Some(d) => s.serialize_some(&d.as_secs()),
        None => s.serialize_none(),
    }
}

impl Limit {
    pub(crate) fn key(&self) -> LimitKey {
        LimitKey {
            scope: self.scope,
            name: self.name.clone(),
            per_secs: self.per.map_or(0, |d| d.as_secs() as u32),
        }
    }
}

type Row = (
    String,
    String,
    u32,
    u32,
    chrono::DateTime<chrono::Utc>,
    String,
);

fn from_rows(rows: Vec<Row>) -> Vec<Limit> {
    rows.into_iter()
        .filter_map(|(scope, name, per_secs, max_jobs, set_at, set_by)| {
            Some(Limit {
                scope: LimitScope::parse(&scope)?,
                name,
                per: (per_secs > 0).then(|| Duration::from_secs(u64::from(per_secs))),
                max_jobs,
                set_at,
                set_by,
            })
        })
        .collect()
}

const SELECT_ALL: &str = "SELECT CAST(scope AS CHAR), CAST(name AS CHAR), per_secs, max_jobs, set_at, \
                          CAST(set_by AS CHAR) FROM jobq_limits ORDER BY scope, name, per_secs";

/// Every limit.
pub(crate) async fn all(pool: &MySqlPool) -> Result<Vec<Limit>> {
    Ok(from_rows(sqlx::query_as(SELECT_ALL).fetch_all(pool).await?))
}

/// Every limit, on a worker's own connection.
pub(crate) async fn all_on(conn: &mut MySqlConnection) -> Result<Vec<Limit>, sqlx::Error> {
    Ok(from_rows(sqlx::query_as(SELECT_ALL).fetch_all(conn).await?))
}

/// Whether any of `full` (limits a claim found full) has room again, or is gone: one read-only
/// statement, so a worker held back by a limit looks without writing the limit row.
pub(crate) async fn any_room(
    conn: &mut MySqlConnection,
    full: &[LimitKey],
) -> Result<bool, sqlx::Error> {
    if full.is_empty() {
        return Ok(true);
    }
    let mut q = sqlx::QueryBuilder::<sqlx::MySql>::new("SELECT CAST((");
    for (i, key) in full.iter().enumerate() {
        if i > 0 {
            q.push(") OR (");
        }
        // A limit removed meanwhile reads as room.
        q.push("COALESCE((SELECT CAST(max_jobs AS SIGNED) > ");
        push_used(&mut q, key);
        push_where_key(&mut q, key);
        q.push("), TRUE)");
    }
    q.push(") AS SIGNED)");
    let room: i64 = q.build_query_scalar().fetch_one(conn).await?;
    Ok(room > 0)
}

/// Reads the room limit `key` leaves, in the caller's transaction (after the write that locks its
/// row): a concurrency limit's maximum less the jobs running now, a rate limit's maximum less the jobs
/// started in the last period. `None` when the limit is gone.
pub(crate) async fn room(
    tx: &mut MySqlConnection,
    key: &LimitKey,
) -> Result<Option<u32>, sqlx::Error> {
    let mut read = sqlx::QueryBuilder::<sqlx::MySql>::new("SELECT CAST(max_jobs AS SIGNED) - ");
    push_used(&mut read, key);
    push_where_key(&mut read, key);
    let left: Option<i64> = read.build_query_scalar().fetch_optional(&mut *tx).await?;
    Ok(left.map(|l| u32::try_from(l).unwrap_or(0)))
}

/// What limit `key` has used up, as a signed SQL expression: the jobs running now (a concurrency
/// limit), or the jobs started within the last `per_secs` (a rate limit, from `jobq_limit_starts`).
fn push_used<'a>(q: &mut sqlx::QueryBuilder<'a, sqlx::MySql>, key: &'a LimitKey) {
    if key.per_secs == 0 {
        q.push(running_count(key.scope));
        q.push_bind(key.name.as_str());
        q.push(")");
    } else {
        // A start at `at` counts while `at > NOW(6) - per`: a claim is let through only when fewer
        // than max_jobs starts lie in the period that ends now, so no period of that length, wherever
        // it begins, holds more (see `record_starts`).
        q.push(
            "CAST(COALESCE((SELECT SUM(jobs) FROM jobq_limit_starts WHERE scope = jobq_limits.scope \
             AND name = jobq_limits.name AND per_secs = jobq_limits.per_secs \
             AND at > NOW(6) - INTERVAL jobq_limits.per_secs SECOND), 0) AS SIGNED)",
        );
    }
}

/// ` FROM jobq_limits WHERE` the row of `key`.
fn push_where_key<'a>(q: &mut sqlx::QueryBuilder<'a, sqlx::MySql>, key: &'a LimitKey) {
    q.push(" FROM jobq_limits WHERE scope = ");
    q.push_bind(key.scope.as_str());
    q.push(" AND name = ");
    q.push_bind(key.name.as_str());
    q.push(" AND per_secs = ");
    q.push_bind(key.per_secs);
}

/// Records that a claim under rate limit `key` started `jobs` jobs, in the claim's transaction after
/// its stamp, and forgets starts older than the period. The time recorded (this statement's `NOW(6)`)
/// is no earlier than the jobs' `started_at` (the stamp's `NOW(6)`, an earlier statement), and a later
/// claim reads its room before it stamps: so two starts `max_jobs` apart are always at least a period
/// apart, which is what makes the window slide. (On one server; the nodes of a Galera cluster each use
/// their own clock, and the bound holds up to their skew.)
pub(crate) async fn record_starts(
    tx: &mut MySqlConnection,
    key: &LimitKey,
    jobs: u32,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM jobq_limit_starts WHERE scope = ? AND name = ? AND per_secs = ? \
         AND at <= NOW(6) - INTERVAL per_secs SECOND",
    )
    .bind(key.scope.as_str())
    .bind(&key.name)
    .bind(key.per_secs)
    .execute(&mut *tx)
    .await?;
    // Two claims of one limit take turns on its row, so one microsecond rarely holds two; if it does,
    // they add up.
    sqlx::query(
        "INSERT INTO jobq_limit_starts (scope, name, per_secs, at, jobs) VALUES (?, ?, ?, NOW(6), ?) \
         ON DUPLICATE KEY UPDATE jobs = jobs + VALUES(jobs)",
    )
    .bind(key.scope.as_str())
    .bind(&key.name)
    .bind(key.per_secs)
    .bind(jobs)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The start of a subquery counting the running jobs a concurrency limit counts, up to the name:
/// through the claimants' holdings lists, one primary-key lookup per listed row, whatever the table's
/// size. A row running on no list (stamped by a jobq older than schema 38 during an upgrade) counts
/// once the reaper's sweep has listed it.
pub(crate) fn running_count(scope: LimitScope) -> &'static str {
    macro_rules! count_where {
        ($column:literal) => {
            concat!(
                "(SELECT COUNT(DISTINCT q.id) FROM jobq_holdings h JOIN ",
                crate::statements::listed_running!(),
                " WHERE q.",
                $column,
                " = "
            )
        };
    }
    match scope {
        LimitScope::Kind => count_where!("kind"),
        LimitScope::Queue => count_where!("queue"),
    }
}

/// The limits that apply to a claim of some kinds in one queue: the queue's own, and each kind's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Applying {
    /// The queue's limits.
    pub(crate) queue: Vec<LimitKey>,
    /// The kinds that have limits, each with its own.
    pub(crate) kinds: Vec<(String, Vec<LimitKey>)>,
}

impl Applying {
    /// The limits of `all` that apply to a claim of `kinds` in `queue`.
    pub(crate) fn of(all: &[Limit], queue: &str, kinds: &[String]) -> Self {
        let queue_limits = all
            .iter()
            .filter(|l| l.scope == LimitScope::Queue && l.name == queue)
            .map(Limit::key)
            .collect();
        let kinds = kinds
            .iter()
            .filter_map(|k| {
                let own: Vec<LimitKey> = all
                    .iter()
                    .filter(|l| l.scope == LimitScope::Kind && &l.name == k)
                    .map(Limit::key)
                    .collect();
                (!own.is_empty()).then(|| (k.clone(), own))
            })
            .collect();
        Self {
            queue: queue_limits,
            kinds,
        }
    }

    /// No limit applies: the claim is the plain one.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.kinds.is_empty()
    }

    /// The limits a job of `kind` counts against: the queue's and the kind's own.
    pub(crate) fn of_kind<'s>(&'s self, kind: &str) -> impl Iterator<Item = &'s LimitKey> {
        self.queue.iter().chain(
            self.kinds
                .iter()
                .filter(move |(k, _)| k == kind)
                .flat_map(|(_, own)| own),
        )
    }

    /// Every limit, each once, in the one order every claim locks them in (so two claims never wait
    /// for each other crosswise).
    pub(crate) fn in_lock_order(&self) -> Vec<&LimitKey> {
        let mut all: Vec<&LimitKey> = self
            .queue
            .iter()
            .chain(self.kinds.iter().flat_map(|(_, own)| own))
            .collect();
        all.sort_by(|a, b| {
            (a.scope.as_str(), &a.name, a.per_secs).cmp(&(b.scope.as_str(), &b.name, b.per_secs))
        });
        all.dedup();
        all
    }
}

/// Sets a limit.
pub(crate) async fn set(pool: &MySqlPool, key: &LimitKey, max_jobs: u32, by: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO jobq_limits (scope, name, per_secs, max_jobs, set_by) VALUES (?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE max_jobs = VALUES(max_jobs), set_by = VALUES(set_by), \
         set_at = NOW(6)",
    )
    .bind(key.scope.as_str())
    .bind(&key.name)
    .bind(key.per_secs)
    .bind(max_jobs)
    .bind(by)
    .execute(pool)
    .await?;
    Ok(())
}

/// Removes a limit, and the starts a rate limit recorded; false when there was none.
pub(crate) async fn remove(pool: &MySqlPool, key: &LimitKey) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let r = sqlx::query("DELETE FROM jobq_limits WHERE scope = ? AND name = ? AND per_secs = ?")
        .bind(key.scope.as_str())
        .bind(&key.name)
        .bind(key.per_secs)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM jobq_limit_starts WHERE scope = ? AND name = ? AND per_secs = ?")
        .bind(key.scope.as_str())
        .bind(&key.name)
        .bind(key.per_secs)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(r.rows_affected() > 0)
}
