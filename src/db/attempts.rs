//! The attempts of a job that did not end done (`jobq_attempts`, schema 9): written in the transaction
//! of the change they record, read by `jobq jobs show` and the dashboard, pruned with the jobs.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder, Row};

use crate::db::row::{opt_text, text};
use crate::error::Result;
use crate::job::JobId;

/// One attempt of a job that ended other than done.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AttemptRecord {
    /// Which attempt (1 is the first; an operator's retry starts again at 1).
    pub attempt: u16,
    /// How it ended: retry, dead, cancelled, interrupted (a shutdown or the self-fence stopped it),
    /// released (its claimant died and a reaper or supervisor took the row back), or snoozed (the
    /// handler asked to run later, and the attempt was given back).
    pub outcome: String,
    /// The claim token of the process that ran it.
    pub claim: Option<String>,
    /// When it started (None if it was claimed but never started).
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub ended_at: DateTime<Utc>,
    /// Its error, or why it was stopped.
    pub error: Option<String>,
}

impl<'r> sqlx::FromRow<'r, MySqlRow> for AttemptRecord {
    fn from_row(row: &'r MySqlRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            attempt: row.try_get("attempt")?,
            outcome: text(row, "outcome")?,
            claim: opt_text(row, "claim")?,
            started_at: row.try_get("started_at")?,
            ended_at: row.try_get("ended_at")?,
            error: opt_text(row, "error")?,
        })
    }
}

/// Records the attempt the rows `ids` just ended, as `outcome` (an SQL expression over the job row, read
/// after the change), run by `claim`, with `error`. Runs in the caller's transaction.
pub(crate) async fn record(
    conn: &mut MySqlConnection,
    ids: &[u64],
    outcome: &str,
    claim: &str,
    error: Option<&str>,
) -> Result<(), sqlx::Error> {
    for chunk in ids.chunks(crate::db::ID_CHUNK) {
        let mut q = QueryBuilder::<MySql>::new(format!(
            "INSERT INTO jobq_attempts (job_id, attempt, outcome, claim, started_at, error) \
             SELECT id, attempts, {outcome}, "
        ));
        q.push_bind(claim).push(", started_at, ").push_bind(error);
        q.push(" FROM job_queue WHERE id IN (");
        let mut list = q.separated(", ");
        for id in chunk {
            list.push_bind(*id);
        }
        q.push(") ORDER BY id");
        q.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// The recorded attempts of job `id`, oldest first.
pub(crate) async fn of_job(pool: &MySqlPool, id: JobId) -> Result<Vec<AttemptRecord>> {
    Ok(sqlx::query_as(
        "SELECT attempt, outcome, claim, started_at, ended_at, error FROM jobq_attempts \
         WHERE job_id = ? ORDER BY id",
    )
    .bind(id)
    .fetch_all(pool)
    .await?)
}
