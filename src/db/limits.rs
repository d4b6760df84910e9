//! Global limits (schema 14): `jobq_limits`, one row per limit on a kind or queue: how many run at once
//! (`per_secs` 0) or how many start per period. The claim under limits lives in [`super::claim`]; this
//! file keeps the table's other statements.

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
        q.push("COALESCE((SELECT ");
        if key.per_secs == 0 {
            q.push("max_jobs > ");
            q.push(running_count(key.scope));
            q.push_bind(key.name.as_str());
            q.push(")");
        } else {
            q.push(
                "max_jobs > window_claims OR window_start IS NULL \
                 OR window_start <= NOW(6) - INTERVAL per_secs SECOND",
            );
        }
        q.push(" FROM jobq_limits WHERE scope = ");
        q.push_bind(key.scope.as_str());
        q.push(" AND name = ");
        q.push_bind(key.name.as_str());
        q.push(" AND per_secs = ");
        q.push_bind(key.per_secs);
        q.push("), TRUE)");
    }
    q.push(") AS SIGNED)");
    let room: i64 = q.build_query_scalar().fetch_one(conn).await?;
    Ok(room > 0)
}

/// The start of a subquery counting the running jobs a concurrency limit counts, up to the name: the
/// `finished` index's `state = 'running'` range, as many entries as jobs run now, whatever the table's
/// size.
pub(crate) fn running_count(scope: LimitScope) -> &'static str {
    match scope {
        LimitScope::Kind => {
            "(SELECT COUNT(*) FROM job_queue FORCE INDEX (finished) WHERE state = 'running' AND kind = "
        }
        LimitScope::Queue => {
            "(SELECT COUNT(*) FROM job_queue FORCE INDEX (finished) WHERE state = 'running' AND queue = "
        }
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

/// Removes a limit; false when there was none.
pub(crate) async fn remove(pool: &MySqlPool, key: &LimitKey) -> Result<bool> {
    let r = sqlx::query("DELETE FROM jobq_limits WHERE scope = ? AND name = ? AND per_secs = ?")
        .bind(key.scope.as_str())
        .bind(&key.name)
        .bind(key.per_secs)
        .execute(pool)
        .await?;
    Ok(r.rows_affected() > 0)
}
