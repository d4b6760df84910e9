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
mod child;
mod clock;
mod cluster;
mod config;
mod cpu;
mod ctx;
mod drain;
mod enqueue;
mod footprint;
mod idle;
mod languages;
mod lean;
mod median;
mod procs;
mod raw;
mod report;
mod rowcost;
mod rows;
mod scratch;
mod steady;
mod tablecpu;
mod web;
mod wire;
mod workers;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::{ConnectOptions, Connection, Executor};
use tokio_util::sync::CancellationToken;

use jobq::ConnectConfig;

pub(crate) use child::jobq_child;
pub(crate) use clock::{clock_offset, now_us, quantile};
pub use config::{BenchConfig, Section, Settings};
pub(crate) use ctx::Ctx;
use ctx::note;
pub(crate) use procs::SUBCOMMAND as WORKER_SUBCOMMAND;
pub use raw::FinishMode;
pub use report::{
    BenchReport, BigReport, Check, DrainReport, DrainRun, EnqueueReport, FootprintReport,
    IdleReport, RatePoint, RawCell, RawReport, ServerInfo, SteadyReport, render_text,
};
pub(crate) use rows::{insert_plain, run_and_claim_us, statement_counts};
pub(crate) use scratch::database_url;
use scratch::{drop_scratch, is_local, server_info};

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
        let server_pid = if is_local(&base_opts) {
            cpu::server_pid(&pool).await
        } else {
            None
        };
        let ctx = Ctx {
            cfg: cfg.clone(),
            url: url.clone(),
            pool,
            clock_offset_us: 0,
            checks: Mutex::new(Vec::new()),
            stop: stop.clone(),
            server_pid,
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
    let mariadb = server.version.contains("MariaDB");
    let mut report = BenchReport::new(&ctx.cfg, name, server, load_start);

    if ctx.cfg.runs(Section::Raw) {
        let mut raw = raw::run(&ctx).await?;
        raw.lean = lean::run(&ctx).await?;
        raw.row_costs = rowcost::run(&ctx, mariadb).await?;
        raw.table_cpu = tablecpu::run(&ctx).await?;
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
        // Last, and on other servers: a cluster that fails the run must not take the other
        // sections' figures with it.
        match cluster::run(&ctx, &urls).await {
            Ok(cluster) => report.cluster = Some(cluster),
            Err(e) => {
                ctx.progress(format!("cluster: stopped: {e}"));
                ctx.check(
                    Section::Cluster,
                    "the cluster section ran to its end",
                    false,
                    e.to_string(),
                );
            }
        }
    }
    report.load.end = cpu::loadavg();
    report.elapsed_secs = started.elapsed().as_secs_f64();
    report.checks = std::mem::take(&mut *ctx.checks.lock().unwrap_or_else(|e| e.into_inner()));
    report.finish();
    ctx.pool.close().await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
