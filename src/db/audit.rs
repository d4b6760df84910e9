//! The audit trail (`jobq_audit`, schema 8): what operators changed, through the dashboard, the CLI
//! or a facade named with `by`. Written only through `admin::audit::Auditor`.

use chrono::{DateTime, Utc};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlRow;

use crate::db::row::text;
use crate::error::Result;

/// One change an operator made.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct AuditEntry {
    /// Row id.
    pub(crate) id: u64,
    /// When.
    pub(crate) at: DateTime<Utc>,
    /// Who: the signed-in user, `token` for a bearer token, `local` without credentials.
    pub(crate) actor: String,
    /// What: `job.retry`, `jobs.cancel`, `schedule.pause`, ...
    pub(crate) action: String,
    /// On what: a job id, a list of ids, a filter, a schedule name.
    pub(crate) target: String,
    /// How many rows it changed.
    pub(crate) affected: u64,
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for AuditEntry {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row;
        Ok(Self {
            id: row.try_get("id")?,
            at: row.try_get("at")?,
            actor: text(row, "actor")?,
            action: text(row, "action")?,
            target: text(row, "target")?,
            affected: row.try_get("affected")?,
        })
    }
}

/// Widths of the columns: longer values are cut (a target naming thousands of ids, say).
const ACTOR_CHARS: usize = 255;
const TARGET_CHARS: usize = 1024;

fn cut(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((at, _)) => s[..at].to_string(),
        None => s.to_string(),
    }
}

/// Writes one entry.
pub(crate) async fn record(
    pool: &MySqlPool,
    actor: &str,
    action: &str,
    target: &str,
    affected: u64,
) -> Result<()> {
    sqlx::query("INSERT INTO jobq_audit (actor, action, target, affected) VALUES (?, ?, ?, ?)")
        .bind(cut(actor, ACTOR_CHARS))
        .bind(action)
        .bind(cut(target, TARGET_CHARS))
        .bind(affected)
        .execute(pool)
        .await?;
    Ok(())
}

/// The newest `limit` entries, newest first.
pub(crate) async fn recent(pool: &MySqlPool, limit: u32) -> Result<Vec<AuditEntry>> {
    Ok(sqlx::query_as(
        "SELECT id, at, actor, action, target, affected FROM jobq_audit ORDER BY id DESC LIMIT ?",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cut_counts_characters_not_bytes() {
        assert_eq!(cut("ééé", 2), "éé");
        assert_eq!(cut("ab", 5), "ab");
    }
}
