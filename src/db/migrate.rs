//! The schema migrator.
//!
//! jobq keeps its own bookkeeping table (`jobq_schema_migrations`) instead of using sqlx's migrator,
//! because jobq lives in the application's database: an application that itself uses sqlx migrations
//! would find jobq's versions mixed into its `_sqlx_migrations` table and refuse to start.
//!
//! Migrations are forward-only and each file holds one DDL statement where it can: MySQL commits DDL
//! implicitly, so a file with several statements could be left half applied. Every statement is written to
//! be safe to run again (`IF NOT EXISTS` where both servers have it; a duplicate column or index error is
//! taken as "already applied" where MySQL 8 has no such clause), so a migration interrupted between its DDL
//! and its bookkeeping row is simply applied again. A `GET_LOCK` serialises concurrent `jobq migrate` runs.

use std::time::Duration;

use sqlx::{Executor, MySqlPool};
use tracing::info;

use crate::errno;
use crate::error::{Error, Result};

/// One schema step, embedded in the binary from `migrations/`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    /// The version, from the file name's number.
    pub version: i64,
    /// The file name.
    pub name: &'static str,
    /// The SQL text.
    pub sql: &'static str,
}

/// Every migration this build knows, in order.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_job_queue.sql",
        sql: include_str!("../../migrations/0001_job_queue.sql"),
    },
    Migration {
        version: 2,
        name: "0002_processes.sql",
        sql: include_str!("../../migrations/0002_processes.sql"),
    },
    Migration {
        version: 3,
        name: "0003_cancel_requests.sql",
        sql: include_str!("../../migrations/0003_cancel_requests.sql"),
    },
    Migration {
        version: 4,
        name: "0004_schedules.sql",
        sql: include_str!("../../migrations/0004_schedules.sql"),
    },
    Migration {
        version: 5,
        name: "0005_schedule_runs.sql",
        sql: include_str!("../../migrations/0005_schedule_runs.sql"),
    },
    Migration {
        version: 6,
        name: "0006_wait_for_work.sql",
        sql: include_str!("../../migrations/0006_wait_for_work.sql"),
    },
    Migration {
        version: 7,
        name: "0007_fence.sql",
        sql: include_str!("../../migrations/0007_fence.sql"),
    },
    Migration {
        version: 8,
        name: "0008_audit.sql",
        sql: include_str!("../../migrations/0008_audit.sql"),
    },
    Migration {
        version: 9,
        name: "0009_attempts.sql",
        sql: include_str!("../../migrations/0009_attempts.sql"),
    },
    Migration {
        version: 10,
        name: "0010_queue_control.sql",
        sql: include_str!("../../migrations/0010_queue_control.sql"),
    },
    Migration {
        version: 11,
        name: "0011_queues.sql",
        sql: include_str!("../../migrations/0011_queues.sql"),
    },
    Migration {
        version: 12,
        name: "0012_unique_jobs.sql",
        sql: include_str!("../../migrations/0012_unique_jobs.sql"),
    },
    Migration {
        version: 13,
        name: "0013_scale.sql",
        sql: include_str!("../../migrations/0013_scale.sql"),
    },
    Migration {
        version: 14,
        name: "0014_limits.sql",
        sql: include_str!("../../migrations/0014_limits.sql"),
    },
    Migration {
        version: 15,
        name: "0015_queue_hosts.sql",
        sql: include_str!("../../migrations/0015_queue_hosts.sql"),
    },
    Migration {
        version: 16,
        name: "0016_dependencies.sql",
        sql: include_str!("../../migrations/0016_dependencies.sql"),
    },
    Migration {
        version: 17,
        name: "0017_unique_per_kind.sql",
        sql: include_str!("../../migrations/0017_unique_per_kind.sql"),
    },
    Migration {
        version: 18,
        name: "0018_limit_starts.sql",
        sql: include_str!("../../migrations/0018_limit_starts.sql"),
    },
    Migration {
        version: 19,
        name: "0019_max_attempts.sql",
        sql: include_str!("../../migrations/0019_max_attempts.sql"),
    },
    Migration {
        version: 20,
        name: "0020_dependents.sql",
        sql: include_str!("../../migrations/0020_dependents.sql"),
    },
    Migration {
        version: 21,
        name: "0021_jobq_finish.sql",
        sql: include_str!("../../migrations/0021_jobq_finish.sql"),
    },
    Migration {
        version: 22,
        name: "0022_progress_output.sql",
        sql: include_str!("../../migrations/0022_progress_output.sql"),
    },
    Migration {
        version: 23,
        name: "0023_jobq_progress.sql",
        sql: include_str!("../../migrations/0023_jobq_progress.sql"),
    },
    Migration {
        version: 24,
        name: "0024_jobq_output.sql",
        sql: include_str!("../../migrations/0024_jobq_output.sql"),
    },
    Migration {
        version: 25,
        name: "0025_job_columns.sql",
        sql: include_str!("../../migrations/0025_job_columns.sql"),
    },
    Migration {
        version: 26,
        name: "0026_debounce.sql",
        sql: include_str!("../../migrations/0026_debounce.sql"),
    },
    Migration {
        version: 27,
        name: "0027_ordered_keys.sql",
        sql: include_str!("../../migrations/0027_ordered_keys.sql"),
    },
    Migration {
        version: 28,
        name: "0028_jobq_enqueue_keyed.sql",
        sql: include_str!("../../migrations/0028_jobq_enqueue_keyed.sql"),
    },
    Migration {
        version: 29,
        name: "0029_priority_aging.sql",
        sql: include_str!("../../migrations/0029_priority_aging.sql"),
    },
    Migration {
        version: 30,
        name: "0030_cluster_safe_uniqueness.sql",
        sql: include_str!("../../migrations/0030_cluster_safe_uniqueness.sql"),
    },
    Migration {
        version: 31,
        name: "0031_jobq_jobs_columns.sql",
        sql: include_str!("../../migrations/0031_jobq_jobs_columns.sql"),
    },
    Migration {
        version: 32,
        name: "0032_due_kinds_index.sql",
        sql: include_str!("../../migrations/0032_due_kinds_index.sql"),
    },
    Migration {
        version: 33,
        name: "0033_process_nodes.sql",
        sql: include_str!("../../migrations/0033_process_nodes.sql"),
    },
    Migration {
        version: 34,
        name: "0034_state_claim_index.sql",
        sql: include_str!("../../migrations/0034_state_claim_index.sql"),
    },
    Migration {
        version: 35,
        name: "0035_jobq_finish_unchecked.sql",
        sql: include_str!("../../migrations/0035_jobq_finish_unchecked.sql"),
    },
    Migration {
        version: 36,
        name: "0036_jobq_progress_unchecked.sql",
        sql: include_str!("../../migrations/0036_jobq_progress_unchecked.sql"),
    },
    Migration {
        version: 37,
        name: "0037_jobq_output_unchecked.sql",
        sql: include_str!("../../migrations/0037_jobq_output_unchecked.sql"),
    },
    Migration {
        version: 38,
        name: "0038_holdings.sql",
        sql: include_str!("../../migrations/0038_holdings.sql"),
    },
    Migration {
        version: 39,
        name: "0039_rare_state_index.sql",
        sql: include_str!("../../migrations/0039_rare_state_index.sql"),
    },
    Migration {
        version: 40,
        name: "0040_done_minutes.sql",
        sql: include_str!("../../migrations/0040_done_minutes.sql"),
    },
    Migration {
        version: 41,
        name: "0041_drop_state_claim.sql",
        sql: include_str!("../../migrations/0041_drop_state_claim.sql"),
    },
    Migration {
        version: 42,
        name: "0042_rare_at.sql",
        sql: include_str!("../../migrations/0042_rare_at.sql"),
    },
];

/// The schema version this build needs.
pub fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

const LOCK_NAME: &str = "jobq_migrate";
/// How long a migration waits for another one to finish before it gives up.
const LOCK_WAIT: Duration = Duration::from_secs(60);

// language=MySQL
const CREATE_BOOKKEEPING: &str = r#"
CREATE TABLE IF NOT EXISTS jobq_schema_migrations (
  version    BIGINT NOT NULL PRIMARY KEY,
  name       VARCHAR(255) NOT NULL,
  applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"#;

/// What `migrate` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// Versions applied by this call.
    pub applied: Vec<i64>,
    /// The version the database is at now.
    pub version: i64,
}

/// Applies every migration the database does not have yet. Safe to run any number of times, also
/// from several processes at once.
pub async fn migrate(pool: &MySqlPool) -> Result<MigrateReport> {
    let mut conn = pool.acquire().await?;
    // GET_LOCK belongs to the session, so the whole run stays on this one connection.
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
        .bind(LOCK_NAME)
        .bind(LOCK_WAIT.as_secs())
        .fetch_one(&mut *conn)
        .await?;
    // 0: another session held the lock the whole time; NULL: the wait itself failed (killed). Either
    // way this run did not get it.
    if got != Some(1) {
        return Err(Error::MigrationLocked { waited: LOCK_WAIT });
    }
    let result = apply_pending(&mut conn).await;
    let _ = sqlx::query("DO RELEASE_LOCK(?)")
        .bind(LOCK_NAME)
        .execute(&mut *conn)
        .await;
    result
}

async fn apply_pending(conn: &mut sqlx::MySqlConnection) -> Result<MigrateReport> {
    conn.execute(CREATE_BOOKKEEPING).await?;
    let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM jobq_schema_migrations")
        .fetch_all(&mut *conn)
        .await?;
    let mut report = MigrateReport::default();
    for m in MIGRATIONS {
        if done.contains(&m.version) {
            continue;
        }
        for stmt in statements(m.sql) {
            match conn.execute(stmt.as_str()).await {
                Ok(_) => {}
                // MySQL 8 has no `ADD COLUMN IF NOT EXISTS`: a migration interrupted after its DDL but
                // before its bookkeeping row finds its column or index already there when run again.
                Err(e) if already_applied(&e) => {
                    info!(version = m.version, error = %e, "statement already applied; skipping");
                }
                // A MariaDB-only statement (all of it in a `/*M! … */` executable comment) is an empty
                // query to MySQL: nothing for that server to do.
                Err(e) if errno::number(&e) == Some(errno::EMPTY_QUERY) => {
                    info!(
                        version = m.version,
                        "statement for MariaDB only; nothing to do here"
                    );
                }
                Err(source) => {
                    return Err(Error::Migration {
                        name: m.name,
                        source,
                    });
                }
            }
        }
        sqlx::query("INSERT INTO jobq_schema_migrations (version, name) VALUES (?, ?)")
            .bind(m.version)
            .bind(m.name)
            .execute(&mut *conn)
            .await?;
        info!(version = m.version, name = m.name, "applied migration");
        report.applied.push(m.version);
    }
    report.version = done
        .iter()
        .copied()
        .chain(report.applied.iter().copied())
        .max()
        .unwrap_or(0);
    Ok(report)
}

/// Duplicate column (1060) or key name (1061), or a column or key to drop that is not there (1091):
/// the DDL ran before.
fn already_applied(e: &sqlx::Error) -> bool {
    matches!(
        errno::number(e),
        Some(errno::DUP_FIELDNAME | errno::DUP_KEYNAME | errno::CANT_DROP_FIELD_OR_KEY)
    )
}

/// Splits a migration file into statements: `;` at the end of a line ends one, and lines starting with
/// `--` are comments. A file with the comment line `-- jobq: one statement` (a stored procedure, whose
/// body has semicolons of its own) is sent whole.
fn statements(sql: &str) -> Vec<String> {
    if sql.lines().any(|l| l.trim() == "-- jobq: one statement") {
        let body: Vec<&str> = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect();
        return vec![body.join("\n").trim().to_string()];
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in sql.lines() {
        if line.trim_start().starts_with("--") {
            continue;
        }
        let trimmed = line.trim_end();
        if let Some(body) = trimmed.strip_suffix(';') {
            cur.push_str(body);
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push_str(line);
            cur.push('\n');
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out.retain(|s| !s.trim().is_empty());
    out
}

/// The schema version the database is at, or `None` when jobq was never migrated there.
pub(crate) async fn current_version(pool: &MySqlPool) -> Result<Option<i64>> {
    match sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(version) FROM jobq_schema_migrations")
        .fetch_one(pool)
        .await
    {
        Ok(v) => Ok(v),
        Err(e) if errno::number(&e) == Some(errno::NO_SUCH_TABLE) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Fails with a message that says to run `jobq migrate` unless the schema is exactly what this build
/// needs. Every command but `migrate` calls it before touching the queue.
pub async fn ensure_migrated(pool: &MySqlPool) -> Result<()> {
    let need = latest_version();
    let found = current_version(pool).await?;
    match found {
        Some(v) if v == need => Ok(()),
        Some(v) if v > need => Err(Error::SchemaTooNew {
            database: crate::db::current_database(pool).await?,
            found: v,
            known: need,
        }),
        _ => Err(Error::NotMigrated {
            database: crate::db::current_database(pool).await?,
            found,
            need,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_procedure_file_is_one_statement() {
        let s = statements(
            "-- jobq: one statement\nCREATE PROCEDURE p()\nBEGIN\n  DO 1;\n  DO 2;\nEND\n",
        );
        assert_eq!(
            s,
            vec!["CREATE PROCEDURE p()\nBEGIN\n  DO 1;\n  DO 2;\nEND".to_string()]
        );
    }

    #[test]
    fn splits_statements_and_skips_comments() {
        let s = statements("-- c1\nCREATE TABLE a (x INT);\n-- c2\nCREATE TABLE b (\n y INT\n);\n");
        assert_eq!(s.len(), 2);
        assert!(s[0].starts_with("CREATE TABLE a"));
        assert!(s[1].contains("y INT"));
    }

    #[test]
    fn versions_are_dense_and_match_file_names() {
        // Dense: `ensure_migrated` compares only the highest version applied, so a gap could hide a
        // version a database never got. Changes made side by side renumber theirs before they land.
        let mut last = 0;
        for m in MIGRATIONS {
            assert_eq!(m.version, last + 1, "{} does not follow {last}", m.name);
            last = m.version;
            assert!(m.name.starts_with(&format!("{:04}_", m.version)));
            assert!(!statements(m.sql).is_empty());
        }
    }
}
