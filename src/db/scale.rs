//! The worker counts supervisors keep (schema 13): `jobq_scale`, one row per scope ('' for every host).

use sqlx::MySqlPool;

use crate::error::Result;

/// A stored worker count.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct ScaleSetting {
    /// The host it applies to; empty for every host.
    pub host: String,
    /// Worker processes each supervisor there keeps.
    pub workers: u32,
    /// When it was set.
    pub set_at: chrono::DateTime<chrono::Utc>,
    /// Who set it.
    pub set_by: String,
}

/// Sets the count for `host` ('' for every host).
pub(crate) async fn set(pool: &MySqlPool, host: &str, workers: u32, by: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO jobq_scale (host, workers, set_by) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE workers = VALUES(workers), set_by = VALUES(set_by), set_at = NOW(6)",
    )
    .bind(host)
    .bind(workers)
    .bind(by)
    .execute(pool)
    .await?;
    Ok(())
}

/// Removes the count for `host` ('' is the count for every host); how many were removed (0 or 1).
pub(crate) async fn reset(pool: &MySqlPool, host: &str) -> Result<u64> {
    let r = sqlx::query("DELETE FROM jobq_scale WHERE host = ?")
        .bind(host)
        .execute(pool)
        .await?;
    Ok(r.rows_affected())
}

/// Removes every stored count; how many there were.
pub(crate) async fn reset_all(pool: &MySqlPool) -> Result<u64> {
    Ok(sqlx::query("DELETE FROM jobq_scale")
        .execute(pool)
        .await?
        .rows_affected())
}

/// Every stored count, '' first.
pub(crate) async fn all(pool: &MySqlPool) -> Result<Vec<ScaleSetting>> {
    Ok(sqlx::query_as(
        "SELECT CAST(host AS CHAR) AS host, workers, set_at, CAST(set_by AS CHAR) AS set_by \
         FROM jobq_scale ORDER BY host",
    )
    .fetch_all(pool)
    .await?)
}

/// The count a supervisor on `host` should keep: its host's row, else the row for every host.
pub(crate) async fn wanted(pool: &MySqlPool, host: &str) -> Result<Option<u32>> {
    Ok(sqlx::query_scalar(
        "SELECT workers FROM jobq_scale WHERE host IN ('', ?) ORDER BY host DESC LIMIT 1",
    )
    .bind(host)
    .fetch_optional(pool)
    .await?)
}
