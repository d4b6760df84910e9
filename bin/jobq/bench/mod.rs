//! `jobq bench`: how fast jobq drains, claims and enqueues on a given server, next to what the same SQL
//! does with no jobq code around it.
//!
//! One run creates a scratch database `jobq_bench_<random>` on the configured server, migrates it, runs the
//! sections it was asked for, drops the database (also on error, and on Ctrl-C when the caller cancels the
//! token given to [`run_until`]), and returns a [`BenchReport`]: numbers, targets with PASS/MISS, and
//! correctness checks. Sections:
//!
//! * `raw`: jobq's claim and finish statements (the very texts the library runs, from
//!   [`jobq::statements`]) in a hand-written loop, over connections × rows per claim: the limit.
//! * `drain`: the library [`Worker`](jobq::Worker) with a no-op handler, with jobq's defaults and with
//!   the best settings of a sweep; the cost of a command and of an SQL handler.
//! * `steady`: a producer at a fixed rate under forever-mode workers; pickup latency, sustainable rate.
//! * `big`: drain throughput with a million finished rows in the table, against an empty one.
//! * `idle`: statements per second of one idle forever worker, and INSERT-to-start time of an idle queue.
//! * `footprint`: peak RSS of a real `jobq worker` process while it drains.
//! * `enqueue`: rows/s of the library's enqueue and enqueue_many against plain SQL.
//! * `web`: the dashboard's response times with a million rows in job_queue.
//! * `cluster`: drains with a worker on 1, 2 and 3 nodes of a Galera cluster (`--cluster`), and the
//!   certification conflicts they cost.
//! * `backlog`: the claim's cost with a million due jobs over many queues and kinds against a small
//!   table of the same shape, and how many claims a high-priority job waits behind a long backlog.
//!
//! The benchmark is not a test of speed: only its correctness checks (every job finished exactly once)
//! decide whether a run is good. Speed is compared with targets and reported.

/// Evaluates `$op`, a statement or transaction on the loop's connection, again on deadlocks, lock-wait
/// timeouts and lost connections, up to 20 tries 2 ms apart, as jobq retries its own. (Not expected under
/// READ COMMITTED and SKIP LOCKED, but a finish can still deadlock with another connection's claim, and
/// the loop must not die on one.)
macro_rules! retried {
    ($op:expr) => {{
        let mut tries = 0;
        loop {
            match $op {
                Err(e) if tries < 20 && jobq::is_transient(&e) => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                other => break other,
            }
        }
    }};
}

mod backlog;
mod bigtable;
mod cluster;
mod config;
mod cpu;
mod drain;
mod enqueue;
mod footprint;
mod idle;
mod languages;
mod lean;
mod procs;
mod raw;
mod report;
mod steady;
mod web;
mod wire;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx::{ConnectOptions, Connection, Executor, MySqlPool};
use tokio_util::sync::CancellationToken;

use jobq::ConnectConfig;

pub use config::{BenchConfig, Section, Settings};
pub(crate) use procs::SUBCOMMAND as WORKER_SUBCOMMAND;
pub use raw::FinishMode;
pub use report::{
    BenchReport, BigReport, Check, DrainReport, DrainRun, EnqueueReport, FootprintReport,
    IdleReport, RatePoint, RawCell, RawReport, ServerInfo, SteadyReport, render_text,
};

/// Why a run could not be completed. Correctness failures are not errors: they are [`Check`]s in the
/// report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The scratch database could not be created or prepared.
    #[error("{0}")]
    Setup(String),
    /// The run was interrupted (Ctrl-C); the scratch database was dropped.
    #[error("interrupted; scratch database {0} dropped")]
    Interrupted(String),
    /// A jobq call failed.
    #[error(transparent)]
    Jobq(#[from] jobq::Error),
    /// A statement of the bench failed.
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

/// Result of bench internals.
pub(crate) type BResult<T> = Result<T, BenchError>;

/// Runs the configured sections once and returns the report, stopping early (and dropping the scratch
/// database) when `stop` is cancelled.
///
/// # Errors
/// When the server cannot be reached, the scratch database cannot be created (for instance without the
/// CREATE privilege), or a statement of the bench itself fails; [`BenchError::Interrupted`] when `stop`
/// was cancelled.
pub async fn run_until(
    cfg: BenchConfig,
    stop: CancellationToken,
) -> Result<BenchReport, BenchError> {
    let name = format!("jobq_bench_{:08x}", rand::random::<u32>());
    let base = ConnectConfig::new(&cfg.url)?;
    let base_opts = base.connect_options();
    let mut admin = base_opts
        .clone()
        .database("")
        .connect()
        .await
        .map_err(|e| {
            BenchError::Setup(format!("cannot connect to {}: {e}", base.redacted_url()))
        })?;
    if let Err(e) = admin
        .execute(format!("CREATE DATABASE `{name}`").as_str())
        .await
    {
        return Err(BenchError::Setup(format!(
            "cannot create the scratch database {name} on {}: {}. `jobq bench` needs a user with the \
             CREATE and DROP privileges on the server (or on databases named jobq_bench_%)",
            base.redacted_url(),
            e.as_database_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_string())
        )));
    }
    let url = database_url(&cfg.url, &name);
    let work = async {
        let pool = jobq::connect(&ConnectConfig::new(&url)?.max_connections(4)).await?;
        jobq::migrate(&pool).await?;
        let ctx = Ctx {
            cfg: cfg.clone(),
            url: url.clone(),
            pool,
            clock_offset_us: 0,
            checks: Mutex::new(Vec::new()),
            stop: stop.clone(),
            local_server: is_local(&base_opts),
        };
        run_sections(ctx, &name).await
    };
    let result = tokio::select! {
        r = work => r,
        () = stop.cancelled() => Err(BenchError::Interrupted(name.clone())),
    };
    if matches!(result, Err(BenchError::Interrupted(_))) {
        // Let the interrupted section's workers (their shutdown tokens are children of `stop`) wind down
        // before their database goes away.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if cfg.keep_db {
        if cfg.progress {
            note(format_args!("bench: kept scratch database {name}"));
        }
    } else {
        drop_scratch(&mut admin, &name).await;
    }
    let _ = admin.close().await;
    result
}

/// Ends every other session using the scratch database (workers of an interrupted section), then drops
/// it. Best effort: errors are printed, not returned.
async fn drop_scratch(admin: &mut sqlx::MySqlConnection, name: &str) {
    let ids: Vec<u64> = sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
    )
    .bind(name)
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for id in ids {
        let _ = admin.execute(format!("KILL {id}").as_str()).await;
    }
    if let Err(e) = admin
        .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
        .await
    {
        note(format_args!(
            "bench: could not drop scratch database {name}: {e}"
        ));
    }
}

/// A progress line on stderr. Dropped if stderr is gone (its reader exited): `eprintln!` would panic, and
/// a bench must still drop its scratch database.
fn note(args: std::fmt::Arguments<'_>) {
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
    /// The server runs on this machine, so its CPU time can be read from /proc.
    pub(crate) local_server: bool,
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
    async fn purge_backlog(&self) -> BResult<i64> {
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

/// This jobq binary, quiet, on the scratch database, ready for its subcommand's arguments: none of the
/// caller's config, section or log settings reach it (they would point it elsewhere or change what it
/// prints), stdout is dropped and stderr kept for the check, and it dies with the bench.
pub(crate) fn jobq_child(exe: &std::path::Path, url: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["--database-url", url, "-q"])
        .env_remove("JOBQ_CONFIG")
        .env_remove("JOBQ_DATABASE")
        .env_remove("JOBQ_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
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

/// `url` with its database replaced by `name` (any `?params` kept).
pub(crate) fn database_url(url: &str, name: &str) -> String {
    let (main, query) = match url.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (url, None),
    };
    let head = match main.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('/') {
            Some((authority, _)) => format!("{scheme}://{authority}"),
            None => main.to_string(),
        },
        None => main.to_string(),
    };
    match query {
        Some(q) => format!("{head}/{name}?{q}"),
        None => format!("{head}/{name}"),
    }
}

fn is_local(opts: &sqlx::mysql::MySqlConnectOptions) -> bool {
    opts.get_socket().is_some() || matches!(opts.get_host(), "localhost" | "127.0.0.1" | "::1")
}

/// Microseconds since the Unix epoch on the client's clock.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The server's NOW(6) minus the client's clock, from the round trip with the smallest delay out of a
/// few, so pickup latency can compare a handler's start (client clock) with `run_at` (server clock).
pub(crate) async fn clock_offset(pool: &MySqlPool) -> BResult<i64> {
    let mut conn = pool.acquire().await?;
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..20 {
        let t0 = now_us();
        let server: i64 =
            sqlx::query_scalar("SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)")
                .fetch_one(&mut *conn)
                .await?;
        let t1 = now_us();
        let rtt = t1 - t0;
        if best.is_none_or(|(r, _)| rtt < r) {
            best = Some((rtt, server - (t0 + t1) / 2));
        }
    }
    Ok(best.map_or(0, |(_, off)| off))
}

/// run_at of the given job ids, in microseconds since the epoch (server clock).
pub(crate) async fn run_at_us(pool: &MySqlPool, kind: &str) -> BResult<BTreeMap<u64, i64>> {
    let rows: Vec<(u64, i64)> = sqlx::query_as(
        "SELECT id, CAST(UNIX_TIMESTAMP(run_at) * 1000000 AS SIGNED) FROM job_queue WHERE kind = ?",
    )
    .bind(kind)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// The value at quantile `q` (0..=1) of sorted `v`.
pub(crate) fn quantile(v: &[i64], q: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

async fn run_sections(mut ctx: Ctx, name: &str) -> BResult<BenchReport> {
    let started = Instant::now();
    let load_start = cpu::loadavg();
    let server = server_info(&ctx.pool).await?;
    ctx.clock_offset_us = clock_offset(&ctx.pool).await?;
    ctx.progress(format!(
        "scratch database {name}; server {}; load average {}",
        server.version,
        load_start.map_or("?".into(), |l| format!("{:.2}", l[0]))
    ));
    let mut report = BenchReport::new(&ctx.cfg, name, server, load_start);

    if ctx.cfg.runs(Section::Raw) {
        let mut raw = raw::run(&ctx).await?;
        raw.lean = lean::run(&ctx).await?;
        report.raw = Some(raw);
    }
    if ctx.cfg.runs(Section::Drain) {
        report.drain = Some(drain::run(&ctx, report.raw.as_ref()).await?);
    }
    let best = ctx.cfg.settings_override.unwrap_or_else(|| {
        report
            .drain
            .as_ref()
            .map_or(Settings::DEFAULTS, |d| d.winner.settings)
    });
    if ctx.cfg.runs(Section::Steady) {
        // jobq's defaults are its latency settings; the drain's winner trades latency for throughput.
        // Both are measured, each against its own sustainable rate.
        let mut all = vec![ctx.cfg.settings_override.unwrap_or(Settings::DEFAULTS)];
        if !all.contains(&best) {
            all.push(best);
        }
        for s in all {
            report.steady.push(steady::run(&ctx, s).await?);
        }
    }
    if ctx.cfg.runs(Section::Big) {
        report.big = Some(bigtable::run(&ctx, best).await?);
    }
    if ctx.cfg.runs(Section::Idle) {
        report.idle = Some(idle::run(&ctx).await?);
    }
    if ctx.cfg.runs(Section::Footprint) {
        report.footprint = footprint::run(&ctx).await?;
    }
    if ctx.cfg.runs(Section::Enqueue) {
        report.enqueue = Some(enqueue::run(&ctx).await?);
    }
    if ctx.cfg.runs(Section::Web) {
        report.web = Some(web::run(&ctx).await?);
    }
    if ctx.cfg.runs(Section::Backlog) {
        let s = ctx.cfg.settings_override.unwrap_or(Settings::DEFAULTS);
        report.backlog = Some(backlog::run(&ctx, s).await?);
    }
    if ctx.cfg.runs(Section::Languages) {
        let s = ctx.cfg.settings_override.unwrap_or(Settings::DEFAULTS);
        report.languages = Some(languages::run(&ctx, s).await?);
    }
    if ctx.cfg.runs(Section::Cluster) && !ctx.cfg.cluster_urls.is_empty() {
        let urls = ctx.cfg.cluster_urls.clone();
        report.cluster = Some(cluster::run(&ctx, &urls).await?);
    }
    report.load.end = cpu::loadavg();
    report.elapsed_secs = started.elapsed().as_secs_f64();
    report.checks = std::mem::take(&mut *ctx.checks.lock().unwrap_or_else(|e| e.into_inner()));
    report.finish();
    ctx.pool.close().await;
    Ok(report)
}

async fn server_info(pool: &MySqlPool) -> BResult<ServerInfo> {
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(pool)
        .await?;
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('innodb_flush_log_at_trx_commit', 'log_bin', \
         'sync_binlog', 'innodb_buffer_pool_size', 'tx_isolation', 'transaction_isolation', \
         'performance_schema', 'max_connections', 'innodb_log_file_size')",
    )
    .fetch_all(pool)
    .await?;
    let mut settings: BTreeMap<String, String> = rows.into_iter().collect();
    if let Some(b) = settings.get_mut("innodb_buffer_pool_size")
        && let Ok(n) = b.parse::<u64>()
    {
        *b = format!("{} MiB", n >> 20);
    }
    // MariaDB 10.x names it tx_isolation, MySQL 8 transaction_isolation.
    let session = match sqlx::query_scalar::<_, String>("SELECT @@SESSION.tx_isolation")
        .fetch_one(pool)
        .await
    {
        Ok(s) => s,
        Err(_) => sqlx::query_scalar("SELECT @@SESSION.transaction_isolation")
            .fetch_one(pool)
            .await
            .unwrap_or_else(|_| "unknown".to_string()),
    };
    settings.insert("jobq session isolation".into(), session);
    Ok(ServerInfo { version, settings })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database() {
        assert_eq!(
            database_url("mysql://u:p@h:3306/test", "x"),
            "mysql://u:p@h:3306/x"
        );
        assert_eq!(
            database_url("mysql://h/test?ssl-mode=DISABLED", "x"),
            "mysql://h/x?ssl-mode=DISABLED"
        );
        assert_eq!(database_url("mysql://h", "x"), "mysql://h/x");
    }

    #[test]
    fn sections_parse() {
        assert_eq!("big".parse::<Section>(), Ok(Section::Big));
        assert!("nope".parse::<Section>().unwrap_err().contains("raw,drain"));
    }

    #[test]
    fn sweep_settings_parse() {
        assert_eq!(
            "2:2000:1000".parse::<Settings>(),
            Ok(Settings {
                workers: 2,
                concurrency: 2000,
                batch_size: 1000
            })
        );
        for bad in ["2:2000", "0:10:10", "1:x:10", "1:10:10:10"] {
            let e = bad.parse::<Settings>().unwrap_err();
            assert!(
                e.contains(bad) && e.contains("WORKERS:CONCURRENCY:BATCH"),
                "{e}"
            );
        }
    }

    #[test]
    fn medians() {
        assert_eq!(report::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(report::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(report::median(&[]).is_nan());
    }

    #[test]
    fn quantiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 51);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&[], 0.5), 0);
    }
}
