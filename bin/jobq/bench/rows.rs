//! Writing and reading the jobs a section measures with plain SQL, so the set-up and the checks are
//! not jobq code being measured.

use std::collections::BTreeMap;

use sqlx::{Executor, MySqlPool};

use super::BResult;

/// Claim and finish statements that touched the jobs of `kind`, counted from the rows: every claim
/// stamps `claimed_at = NOW(6)` and every finish `finished_at = NOW(6)`, one value per statement, so the
/// distinct values count the statements (two in the same microsecond would count once).
pub(crate) async fn statement_counts(pool: &MySqlPool, kind: &str) -> BResult<(u64, u64)> {
    let (claims, finishes): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(DISTINCT claimed_at), COUNT(DISTINCT finished_at) FROM job_queue WHERE kind = ?",
    )
    .bind(kind)
    .fetch_one(pool)
    .await?;
    Ok((claims as u64, finishes as u64))
}

/// Inserts `n` due jobs of `kind` with plain 1,000-row INSERTs.
pub(crate) async fn insert_plain(pool: &MySqlPool, kind: &str, n: u64) -> BResult<()> {
    let mut left = n;
    while left > 0 {
        let k = left.min(1000) as usize;
        let sql = format!(
            "INSERT INTO job_queue (kind) VALUES {}",
            vec![format!("('{kind}')"); k].join(",")
        );
        pool.execute(sql.as_str()).await?;
        left -= k as u64;
    }
    Ok(())
}

/// run_at and the last claim's `claimed_at` (the stamp's NOW(6); 0 where never claimed) of the jobs of
/// `kind`, in microseconds since the epoch (server clock).
pub(crate) async fn run_and_claim_us(
    pool: &MySqlPool,
    kind: &str,
) -> BResult<BTreeMap<u64, (i64, i64)>> {
    let rows: Vec<(u64, i64, i64)> = sqlx::query_as(
        "SELECT id, CAST(UNIX_TIMESTAMP(run_at) * 1000000 AS SIGNED), \
         CAST(COALESCE(UNIX_TIMESTAMP(claimed_at), 0) * 1000000 AS SIGNED) FROM job_queue WHERE kind = ?",
    )
    .bind(kind)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(id, r, c)| (id, (r, c))).collect())
}
