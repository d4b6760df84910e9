//! Removing jobq's schema from a database (`jobq disable`): every table, view and procedure the
//! migrations create, and nothing else.
//!
//! The objects are named here rather than found by a `jobq%` pattern, so an application's own table
//! that happens to share the prefix is never dropped; a unit test checks the list against the
//! migrations, so a new migration cannot add an object this would leave behind.

use sqlx::{Executor, MySqlPool};

use crate::db::current_database;
use crate::error::{Error, Result};

/// Views, dropped first: they read the tables.
const VIEWS: &[&str] = &["jobq_jobs", "jobq_jobs_running", "jobq_schedules_next"];
/// Stored procedures.
const PROCEDURES: &[&str] = &[
    "jobq_wait_for_work",
    "jobq_finish",
    "jobq_progress",
    "jobq_output",
    "jobq_enqueue_keyed",
];
/// Tables. The migrations' bookkeeping table is last, so a removal cut short leaves the version
/// behind and is finished by running it again (every drop is `IF EXISTS`).
const TABLES: &[&str] = &[
    "jobq_order_keys",
    "jobq_job_deps",
    "jobq_attempts",
    "jobq_audit",
    "jobq_limit_starts",
    "jobq_limits",
    "jobq_holdings",
    "jobq_done_minutes",
    "jobq_processes",
    "jobq_queue_aging",
    "jobq_queue_hosts",
    "jobq_queues",
    "jobq_scale",
    "jobq_schedule_log",
    "jobq_schedule_runs",
    "jobq_schedules",
    "job_queue",
    "jobq_schema_migrations",
];

/// How long a process may be silent and still count as live for [`uninstall`]'s check: the reaper's
/// default lease.
const LIVE_WITHIN_SECS: u64 = 60;

/// What [`uninstall`] found and removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uninstalled {
    /// The database it worked on.
    pub database: String,
    /// The objects that were there and are gone, in the order dropped.
    pub dropped: Vec<String>,
}

/// Drops jobq's tables, views and procedure from the pool's database, with every job in them.
///
/// Unless `force`, refuses while jobq is at work there: a process that wrote its heartbeat within the
/// last minute, or a job that is queued, running, waiting to retry or waiting for others. Safe to run
/// again (a removal cut short is finished) and on a database where jobq never was (nothing dropped).
///
/// # Errors
/// [`Error::InUse`] naming what is still there; database errors.
pub async fn uninstall(pool: &MySqlPool, force: bool) -> Result<Uninstalled> {
    let database = current_database(pool).await?;
    let present = present_objects(pool).await?;
    if !force
        && present.iter().any(|o| o == "job_queue")
        && let Some(reason) = in_use(pool).await?
    {
        return Err(Error::InUse { database, reason });
    }
    let mut conn = pool.acquire().await?;
    let mut dropped = Vec::new();
    let objects = VIEWS
        .iter()
        .map(|v| (*v, "VIEW"))
        .chain(PROCEDURES.iter().map(|p| (*p, "PROCEDURE")))
        .chain(TABLES.iter().map(|t| (*t, "TABLE")));
    for (name, what) in objects {
        conn.execute(format!("DROP {what} IF EXISTS `{name}`").as_str())
            .await?;
        if present.iter().any(|o| o == name) {
            dropped.push(name.to_string());
        }
    }
    Ok(Uninstalled { database, dropped })
}

/// The names among jobq's objects that exist in the pool's database.
async fn present_objects(pool: &MySqlPool) -> Result<Vec<String>> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
         WHERE table_schema = DATABASE()",
    )
    .fetch_all(pool)
    .await?;
    let routines: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(routine_name AS CHAR) FROM information_schema.routines \
         WHERE routine_schema = DATABASE() AND routine_type = 'PROCEDURE'",
    )
    .fetch_all(pool)
    .await?;
    let ours = |n: &String| VIEWS.iter().chain(TABLES).chain(PROCEDURES).any(|o| o == n);
    Ok(tables.into_iter().chain(routines).filter(ours).collect())
}

/// What keeps jobq at work in the database, if anything.
async fn in_use(pool: &MySqlPool) -> Result<Option<String>> {
    let live: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM jobq_processes \
         WHERE heartbeat_at > CURRENT_TIMESTAMP(6) - INTERVAL ? SECOND",
    )
    .bind(LIVE_WITHIN_SECS)
    .fetch_one(pool)
    .await
    .or_else(|e| missing_table_is_none(e, 0))?;
    let unfinished: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE state IN ('queued', 'running', 'retry', 'waiting')",
    )
    .fetch_one(pool)
    .await?;
    let mut what = Vec::new();
    if live > 0 {
        what.push(format!("{live} live jobq process(es)"));
    }
    if unfinished > 0 {
        what.push(format!("{unfinished} unfinished job(s)"));
    }
    Ok((!what.is_empty()).then(|| what.join(" and ")))
}

/// `Ok(none)` for a table that is not there (a schema from before it), else the error.
fn missing_table_is_none(e: sqlx::Error, none: i64) -> std::result::Result<i64, sqlx::Error> {
    match crate::errno::number(&e) {
        Some(crate::errno::NO_SUCH_TABLE) => Ok(none),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every object a migration creates is in one of the lists, and nothing else is.
    #[test]
    fn the_lists_name_every_object_the_migrations_create() {
        let mut created: Vec<String> = vec!["jobq_schema_migrations".to_string()];
        for m in crate::db::migrate::MIGRATIONS {
            for line in m.sql.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                let Some(at) = words
                    .iter()
                    .position(|w| matches!(*w, "TABLE" | "VIEW" | "PROCEDURE"))
                else {
                    continue;
                };
                if words.first() != Some(&"CREATE") {
                    continue;
                }
                let name = words[at + 1..]
                    .iter()
                    .find(|w| !matches!(**w, "IF" | "NOT" | "EXISTS"))
                    .expect("a name after CREATE");
                created.push(name.trim_end_matches('(').trim_matches('`').to_string());
            }
        }
        created.sort();
        created.dedup();
        let mut listed: Vec<String> = VIEWS
            .iter()
            .chain(PROCEDURES)
            .chain(TABLES)
            .map(|s| s.to_string())
            .collect();
        listed.sort();
        assert_eq!(created, listed);
    }
}
