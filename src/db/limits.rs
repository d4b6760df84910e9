//! Global concurrency limits (schema 14): `jobq_limits`, one row per limited kind or queue. The claim of
//! a limited kind or queue lives in [`super::claim`]; this file keeps the table's other statements.

use sqlx::{MySqlConnection, MySqlPool};

use crate::error::Result;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitScope {
    /// Running jobs of one kind, in any queue.
    Kind,
    /// Running jobs of one queue, of any kind.
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

/// A stored limit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Limit {
    /// What it counts.
    pub scope: LimitScope,
    /// The kind or queue.
    pub name: String,
    /// Most jobs running at once; 0 holds them.
    pub max_running: u32,
    /// When it was set.
    pub set_at: chrono::DateTime<chrono::Utc>,
    /// Who set it.
    pub set_by: String,
}

type Row = (String, String, u32, chrono::DateTime<chrono::Utc>, String);

fn from_rows(rows: Vec<Row>) -> Vec<Limit> {
    rows.into_iter()
        .filter_map(|(scope, name, max_running, set_at, set_by)| {
            Some(Limit {
                scope: LimitScope::parse(&scope)?,
                name,
                max_running,
                set_at,
                set_by,
            })
        })
        .collect()
}

const SELECT_ALL: &str = "SELECT CAST(scope AS CHAR), CAST(name AS CHAR), max_running, set_at, \
                          CAST(set_by AS CHAR) FROM jobq_limits ORDER BY scope, name";

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
    full: &[(LimitScope, String)],
) -> Result<bool, sqlx::Error> {
    if full.is_empty() {
        return Ok(true);
    }
    let mut q = sqlx::QueryBuilder::<sqlx::MySql>::new("SELECT CAST((");
    for (i, (scope, name)) in full.iter().enumerate() {
        if i > 0 {
            q.push(") OR (");
        }
        // A limit removed meanwhile reads as unlimited.
        q.push("COALESCE((SELECT max_running FROM jobq_limits WHERE scope = ");
        q.push_bind(scope.as_str());
        q.push(" AND name = ");
        q.push_bind(name.as_str());
        q.push(match scope {
            LimitScope::Kind => {
                "), 4294967295) > (SELECT COUNT(*) FROM job_queue FORCE INDEX (finished) \
                 WHERE state = 'running' AND kind = "
            }
            LimitScope::Queue => {
                "), 4294967295) > (SELECT COUNT(*) FROM job_queue FORCE INDEX (finished) \
                 WHERE state = 'running' AND queue = "
            }
        });
        q.push_bind(name.as_str());
        q.push(")");
    }
    q.push(") AS SIGNED)");
    let room: i64 = q.build_query_scalar().fetch_one(conn).await?;
    Ok(room > 0)
}

/// Sets a limit.
pub(crate) async fn set(
    pool: &MySqlPool,
    scope: LimitScope,
    name: &str,
    max_running: u32,
    by: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO jobq_limits (scope, name, max_running, set_by) VALUES (?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE max_running = VALUES(max_running), set_by = VALUES(set_by), \
         set_at = NOW(6)",
    )
    .bind(scope.as_str())
    .bind(name)
    .bind(max_running)
    .bind(by)
    .execute(pool)
    .await?;
    Ok(())
}

/// Removes a limit; false when there was none.
pub(crate) async fn remove(pool: &MySqlPool, scope: LimitScope, name: &str) -> Result<bool> {
    let r = sqlx::query("DELETE FROM jobq_limits WHERE scope = ? AND name = ?")
        .bind(scope.as_str())
        .bind(name)
        .execute(pool)
        .await?;
    Ok(r.rows_affected() > 0)
}
