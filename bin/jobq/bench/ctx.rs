//! What every section gets ([`Ctx`]): the scratch database, the settings, the checks recorded so far,
//! and the helpers each section uses on them (waiting for the server to settle, filling the table,
//! checking that every job ran exactly once).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::{Executor, MySqlPool};
use tokio_util::sync::CancellationToken;

use super::{BResult, BenchConfig, Check, Section, insert_plain};

/// A progress line on stderr. Dropped if stderr is gone (its reader exited): `eprintln!` would panic, and
/// a bench must still drop its scratch database.
pub(super) fn note(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// What every section gets.
pub(crate) struct Ctx {
    pub(crate) cfg: BenchConfig,
    /// URL of the scratch database.
    pub(crate) url: String,
    /// A small pool on the scratch database, for set-up and checks.
    pub(crate) pool: MySqlPool,
    /// The server's clock minus the client's, in microseconds (NOW(6) against SystemTime).
    pub(crate) clock_offset_us: i64,
    pub(crate) checks: Mutex<Vec<Check>>,
    /// Cancelled on Ctrl-C; workers' shutdown tokens are its children.
    pub(crate) stop: CancellationToken,
    /// The server's pid when it runs on this machine, so that its CPU time can be read from /proc.
    pub(crate) server_pid: Option<String>,
}

/// How long the server's dirty pages and purge backlog may stop falling before [`Ctx::settle`] gives
/// up waiting (its longest wait is [`BenchConfig::settle`]).
const SETTLE_STALL: Duration = Duration::from_secs(3);

impl Ctx {
    /// Waits (at most [`BenchConfig::settle`], and only while the counts fall) until the server has
    /// written out most of what a fill left dirty in the buffer pool and purged most of what was
    /// deleted: a million inserted rows keep InnoDB flushing for a while, and a drain or claim timed
    /// meanwhile measures the flushing more than the table. Neither counter is jobq's own doing, so both
    /// tables of a comparison wait alike.
    pub(crate) async fn settle(&self) -> BResult<()> {
        let until = Instant::now() + self.cfg.settle;
        // A server that keeps its dirty pages above the mark (a high innodb_max_dirty_pages_pct_lwm,
        // other databases being written) would hold every fill for the whole patience: stop once the
        // counts have not fallen for a while.
        let (mut lowest, mut lowest_at) = ((i64::MAX, i64::MAX), Instant::now());
        while Instant::now() < until && lowest_at.elapsed() < SETTLE_STALL {
            let (dirty, total) = (
                self.global_status("Innodb_buffer_pool_pages_dirty").await?,
                self.global_status("Innodb_buffer_pool_pages_total").await?,
            );
            let unpurged = self.purge_backlog().await?;
            if dirty * 20 <= total && unpurged < 1_000 {
                break;
            }
            if dirty < lowest.0 || unpurged < lowest.1 {
                lowest = (dirty.min(lowest.0), unpurged.min(lowest.1));
                lowest_at = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// A global status counter (SHOW takes no placeholders: `name` is one of the bench's constants).
    pub(crate) async fn global_status(&self, name: &'static str) -> BResult<i64> {
        let sql = format!("SHOW GLOBAL STATUS LIKE '{name}'");
        let row: Option<(String, String)> = sqlx::query_as(&sql).fetch_optional(&self.pool).await?;
        Ok(row.and_then(|(_, v)| v.parse().ok()).unwrap_or(0))
    }

    /// Undo logs of committed transactions not purged yet (InnoDB's history list length; 0 where the
    /// server does not show it).
    pub(crate) async fn purge_backlog(&self) -> BResult<i64> {
        let n: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(`COUNT` AS SIGNED) FROM information_schema.INNODB_METRICS \
             WHERE NAME = 'trx_rseg_history_len'",
        )
        .fetch_optional(&self.pool)
        .await
        .unwrap_or(None);
        Ok(n.unwrap_or(0))
    }

    pub(crate) fn progress(&self, msg: impl AsRef<str>) {
        if self.cfg.progress {
            note(format_args!("bench: {}", msg.as_ref()));
        }
    }

    pub(crate) fn check(
        &self,
        section: Section,
        what: impl Into<String>,
        ok: bool,
        detail: String,
    ) {
        self.checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Check {
                section,
                what: what.into(),
                ok,
                detail,
            });
    }

    /// Empties job_queue (TRUNCATE: no history, no purge debt from the previous measurement).
    pub(crate) async fn truncate(&self) -> BResult<()> {
        self.pool.execute("TRUNCATE TABLE job_queue").await?;
        Ok(())
    }

    /// Empties job_queue, inserts `n` due jobs of `kind` with 1,000-row INSERTs, and refreshes the
    /// statistics (MARIADB-NOTES: freshly bulk-filled tables are planned as scans until they are).
    pub(crate) async fn fill(&self, kind: &str, n: u64) -> BResult<()> {
        self.truncate().await?;
        insert_plain(&self.pool, kind, n).await?;
        self.pool.execute("ANALYZE TABLE job_queue").await?;
        Ok(())
    }

    /// Checks that `expected` jobs of `kind` exist and each finished `done` after exactly one attempt,
    /// and records the check. A job run twice would show `attempts = 2` (or a handler count above
    /// `expected`); a job never finished would not be `done`.
    pub(crate) async fn verify_once(
        &self,
        section: Section,
        what: &str,
        kind: &str,
        expected: u64,
        handler_calls: Option<u64>,
    ) -> BResult<bool> {
        let (total, done_once): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), CAST(COALESCE(SUM(state = 'done' AND attempts = 1 AND claim IS NULL), 0) \
             AS SIGNED) FROM job_queue WHERE kind = ?",
        )
        .bind(kind)
        .fetch_one(&self.pool)
        .await?;
        let done_once = done_once as u64;
        let calls_ok = handler_calls.is_none_or(|c| c == expected);
        let ok = total as u64 == expected && done_once == expected && calls_ok;
        let detail = format!(
            "{expected} jobs: {total} rows, {done_once} done after exactly one attempt{}",
            handler_calls.map_or(String::new(), |c| format!(", {c} handler calls"))
        );
        self.check(section, what, ok, detail);
        Ok(ok)
    }
}
