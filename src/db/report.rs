//! What a running job reports about itself: its progress, and the output it leaves (schema 22). Each
//! write is fenced like a finish, so a copy whose claim was lost cannot overwrite a later attempt's.

use sqlx::MySqlPool;

use crate::claimant::token::TokenText;
use crate::db::finish::fenced;
use crate::db::retry_transient;
use crate::error::Result;
use crate::id::JobId;
use crate::job::AttemptKey;

/// The most bytes of output a job may leave: 64 KiB, as the `jobq_output` procedure checks.
pub(crate) const MAX_OUTPUT: usize = 64 * 1024;

/// The most characters of a progress message, the column's width.
pub(crate) const MAX_MESSAGE: usize = 255;

/// Tries per report: a report is worth a short wait through a deadlock, not a long one (the next
/// report, or the finish, follows).
const TRIES: u32 = 3;

/// Records `percent` and `message` as the progress of the attempt `key` under `claim`. False when the
/// fence did not match (the claim was lost, or the job ended).
pub(crate) async fn progress(
    pool: &MySqlPool,
    key: AttemptKey,
    claim: &TokenText,
    percent: f64,
    message: Option<&str>,
) -> Result<bool> {
    retry_transient("progress", TRIES, || async {
        sqlx::query(concat!(
            crate::statements::unchecked!(),
            "UPDATE job_queue SET progress = ROUND(?, 2), progress_message = ?, \
             reported_attempt = attempts, reported_at = NOW(6)",
            fenced!()
        ))
        .bind(percent)
        .bind(message)
        .bind(key.id)
        .bind(claim.as_str())
        .bind(key.attempt)
        .execute(pool)
        .await
        .map(|r| r.rows_affected() == 1)
    })
    .await
}

/// Stores `json` (checked by the caller: JSON, at most [`MAX_OUTPUT`] bytes) as the output of the
/// attempt `key` under `claim`. False when the fence did not match.
pub(crate) async fn output(
    pool: &MySqlPool,
    key: AttemptKey,
    claim: &TokenText,
    json: &str,
) -> Result<bool> {
    retry_transient("output", TRIES, || async {
        sqlx::query(concat!(
            crate::statements::unchecked!(),
            "UPDATE job_queue SET output = ?, reported_attempt = attempts, reported_at = NOW(6)",
            fenced!()
        ))
        .bind(json)
        .bind(key.id)
        .bind(claim.as_str())
        .bind(key.attempt)
        .execute(pool)
        .await
        .map(|r| r.rows_affected() == 1)
    })
    .await
}

/// Job `id`'s output, `None` when it left none.
///
/// # Errors
/// [`crate::Error::JobNotFound`] when there is no such job.
pub(crate) async fn read_output(pool: &MySqlPool, id: JobId) -> Result<Option<String>> {
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT CAST(output AS CHAR) FROM job_queue WHERE id = ?")
            .bind(id)
            .fetch_optional(pool)
            .await?;
    match row {
        Some((output,)) => Ok(output),
        None => Err(crate::Error::JobNotFound(id)),
    }
}
