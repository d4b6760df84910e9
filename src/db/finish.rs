//! Finishing claimed jobs. Every statement here is fenced: it changes a row only while the row still
//! carries the claimant's token and the attempt number it was claimed with. A claimant whose row was
//! reset (by the reaper, or by an operator) and claimed again by someone else changes nothing, and is
//! told so by the returned `false`.

use std::time::Duration;

use sqlx::{MySql, MySqlPool, QueryBuilder};

use crate::db::retry_transient;
use crate::error::Result;

/// The longest `last_error` kept, in bytes. The column is TEXT (64 KiB); the tail of a long error is the
/// part worth keeping, and the head names what failed, so both ends are kept.
const MAX_ERROR_BYTES: usize = 8 * 1024;

/// How a claimed row ends this attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// Succeeded.
    Done,
    /// Failed; runnable again after `delay`.
    Retry {
        /// How long to wait before the next attempt.
        delay: Duration,
        /// What went wrong.
        error: String,
    },
    /// Failed for good.
    Dead {
        /// What went wrong.
        error: String,
    },
    /// Cancelled while it ran.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// Never started: hand the row back untouched (the attempt is not counted).
    Release,
    /// Stopped part way by a shutdown: runnable again at once; the attempt counts.
    Interrupted {
        /// Why.
        reason: String,
    },
}

/// Finishes tries this many times in all on deadlocks and lost connections (about half a minute), so a
/// short database outage does not lose an outcome. If it still fails, the row stays `running` under
/// our token and is recovered like any dead claimant's.
const TRIES: u32 = 14;

/// Applies `finish` to job `id` if the row still carries `token` and `attempt`. Returns false when the
/// fence did not match (the claim was lost), true when the row changed.
pub async fn finish(
    pool: &MySqlPool,
    id: u64,
    token: &str,
    attempt: u16,
    finish: &Finish,
) -> Result<bool> {
    let (sql, delay_us, text): (&str, Option<i64>, Option<String>) = match finish {
        Finish::Done => (
            "UPDATE job_queue SET state = 'done', claim = NULL, finished_at = NOW(6) \
             WHERE id = ? AND claim = ? AND attempts = ? AND state = 'running'",
            None,
            None,
        ),
        // A cancel requested while the attempt ran wins over another attempt.
        Finish::Retry { delay, error } => (
            "UPDATE job_queue SET \
             state = IF(cancel_requested_at IS NULL, 'retry', 'cancelled'), \
             finished_at = IF(cancel_requested_at IS NULL, NULL, NOW(6)), claim = NULL, \
             run_at = NOW(6) + INTERVAL ? MICROSECOND, last_error = ? \
             WHERE id = ? AND claim = ? AND attempts = ? AND state = 'running'",
            Some(delay.as_micros().min(i64::MAX as u128) as i64),
            Some(truncate_error(error)),
        ),
        Finish::Dead { error } => (
            "UPDATE job_queue SET state = 'dead', claim = NULL, finished_at = NOW(6), last_error = ? \
             WHERE id = ? AND claim = ? AND attempts = ? AND state = 'running'",
            None,
            Some(truncate_error(error)),
        ),
        Finish::Cancelled { reason } => (
            "UPDATE job_queue SET state = 'cancelled', claim = NULL, finished_at = NOW(6), last_error = ? \
             WHERE id = ? AND claim = ? AND attempts = ? AND state = 'running'",
            None,
            Some(truncate_error(reason)),
        ),
        Finish::Release => (
            "UPDATE job_queue SET \
             state = IF(cancel_requested_at IS NULL, 'queued', 'cancelled'), \
             finished_at = IF(cancel_requested_at IS NULL, NULL, NOW(6)), \
             claim = NULL, claimed_at = NULL, started_at = NULL, attempts = attempts - 1 \
             WHERE id = ? AND claim = ? AND attempts = ? AND state = 'running'",
            None,
            None,
        ),
        Finish::Interrupted { reason } => (
            "UPDATE job_queue SET \
             state = IF(cancel_requested_at IS NULL, 'queued', 'cancelled'), \
             finished_at = IF(cancel_requested_at IS NULL, NULL, NOW(6)), \
             claim = NULL, last_error = ? \
             WHERE id = ? AND claim = ? AND attempts = ? AND state = 'running'",
            None,
            Some(truncate_error(reason)),
        ),
    };
    let rows = retry_transient("finish", TRIES, || async {
        let mut q = sqlx::query(sql);
        if let Some(us) = delay_us {
            q = q.bind(us);
        }
        if let Some(t) = &text {
            q = q.bind(t.as_str());
        }
        q.bind(id)
            .bind(token)
            .bind(attempt)
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
    })
    .await?;
    Ok(rows == 1)
}

/// Finishes many jobs as done at once: one transaction, one commit, instead of one per job. Each item is
/// fenced like [`finish`] (token, attempt, still running). Returns, per item, whether it was finished.
///
/// The rows are read `FOR UPDATE` first so the result is exact per row: a single multi-row UPDATE
/// would only say how many rows matched, not which.
pub async fn finish_done_batch(
    pool: &MySqlPool,
    token: &str,
    items: &[(u64, u16)],
) -> Result<Vec<bool>> {
    if let [(id, attempt)] = items {
        return Ok(vec![
            finish(pool, *id, token, *attempt, &Finish::Done).await?,
        ]);
    }
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let held = retry_transient("finish batch", TRIES, || async {
        let mut tx = pool.begin().await?;
        let mut q = QueryBuilder::<MySql>::new("SELECT id, attempts FROM job_queue WHERE id IN (");
        let mut ids = q.separated(", ");
        for (id, _) in items {
            ids.push_bind(*id);
        }
        q.push(") AND claim = ").push_bind(token);
        q.push(" AND state = 'running' FOR UPDATE");
        let rows: Vec<(u64, u16)> = q.build_query_as().fetch_all(&mut *tx).await?;
        let fenced: Vec<u64> = rows
            .into_iter()
            .filter(|row| items.contains(row))
            .map(|(id, _)| id)
            .collect();
        if !fenced.is_empty() {
            let mut u = QueryBuilder::<MySql>::new(
                "UPDATE job_queue SET state = 'done', claim = NULL, finished_at = NOW(6) WHERE id IN (",
            );
            let mut ids = u.separated(", ");
            for id in &fenced {
                ids.push_bind(*id);
            }
            u.push(")");
            u.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(fenced)
    })
    .await?;
    Ok(items.iter().map(|(id, _)| held.contains(id)).collect())
}

/// Keeps the head and the tail of a long error message, cut on character boundaries.
pub(crate) fn truncate_error(s: &str) -> String {
    if s.len() <= MAX_ERROR_BYTES {
        return s.to_string();
    }
    let keep = MAX_ERROR_BYTES / 2 - 16;
    let mut head_end = keep;
    while !s.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = s.len() - keep;
    while !s.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!("{}\n[…]\n{}", &s[..head_end], &s[tail_start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_keep_both_ends() {
        let s = format!("HEAD{}é{}TAIL", "x".repeat(10_000), "y".repeat(10_000));
        let t = truncate_error(&s);
        assert!(t.len() <= MAX_ERROR_BYTES);
        assert!(t.starts_with("HEAD") && t.ends_with("TAIL"));
        assert_eq!(truncate_error("short"), "short");
    }
}
