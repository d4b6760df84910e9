//! `jobq bench`.

use crate::bench::{self, BenchConfig, Section};
use anyhow::{Result, bail};
use jobq::CancellationToken;

use super::Env;
use crate::args::{BenchArgs, BenchWorkerArgs};
use crate::out::{out, outln};

pub async fn run(env: &Env, args: BenchArgs) -> Result<()> {
    let json = args.json;
    let mut cfg = bench_config(env, args)?;
    // The footprint section runs this very binary as `jobq worker`, the drain as `__bench-worker`.
    cfg.jobq_exe = std::env::current_exe().ok();
    cfg.progress = !json;

    // Ctrl-C: stop the run; the bench drops the scratch database before returning.
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            crate::out::err_line(format_args!(
                "bench: interrupted; dropping the scratch database"
            ));
            on_signal.cancel();
        }
    });
    let report = bench::run_until(cfg, stop).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        out!("{}", bench::render_text(&report))?;
    }
    if !report.all_checks_pass() {
        bail!("correctness checks failed (see CORRECTNESS above)");
    }
    Ok(())
}

/// The run's configuration: the preset (`--smoke`, `--quick`, else the full run), then each flag given.
fn bench_config(env: &Env, args: BenchArgs) -> Result<BenchConfig> {
    let mut cfg = if args.smoke {
        BenchConfig::smoke(env.url()?)
    } else if args.quick {
        BenchConfig::quick(env.url()?)
    } else {
        BenchConfig::full(env.url()?)
    };
    if let Some(n) = args.jobs {
        cfg = cfg.with_jobs(n);
    }
    if !args.sections.is_empty() {
        cfg.sections = args
            .sections
            .iter()
            .map(|s| s.parse::<Section>())
            .collect::<Result<Vec<_>, String>>()
            .map_err(anyhow::Error::msg)?;
    }
    if let Some(n) = args.big_rows {
        cfg.big_rows = n;
    }
    if let Some(n) = args.backlog_rows {
        cfg.backlog_rows = n.max(1);
    }
    if let Some(n) = args.backlog_small_rows {
        cfg.backlog_small_rows = n.max(1);
    }
    cfg.cluster_urls = args.cluster.clone();
    if let Some(n) = args.cluster_jobs {
        cfg.cluster_jobs = n.max(1);
    }
    if let Some(n) = args.raw_jobs {
        cfg.raw_jobs = n.max(1);
    }
    if !args.sweep.is_empty() {
        cfg.sweep = args
            .sweep
            .iter()
            .map(|s| s.parse::<bench::Settings>())
            .collect::<Result<Vec<_>, String>>()
            .map_err(anyhow::Error::msg)?;
    }
    if !args.raw_workers.is_empty() {
        if args.raw_workers.contains(&0) {
            bail!("--raw-workers: every count must be at least 1");
        }
        cfg.raw_workers = args.raw_workers;
    }
    if !args.raw_batches.is_empty() {
        if args.raw_batches.contains(&0) {
            bail!("--raw-batches: every size must be at least 1");
        }
        cfg.raw_batches = args.raw_batches;
    }
    if args
        .steady_rates
        .iter()
        .any(|r| !(r.is_finite() && *r > 0.0))
    {
        bail!("--steady-rates: every rate must be a number of jobs per second above 0");
    }
    cfg.steady_rates = args.steady_rates;
    if let Some(s) = &args.settings {
        cfg.settings_override = Some(s.parse().map_err(anyhow::Error::msg)?);
    }
    cfg.keep_db = args.keep_db;
    Ok(cfg)
}

/// `__bench-worker`: a library worker in drain mode whose handler for `kind` does nothing, so that a
/// drain through separate processes measures jobq itself (see `bench/procs.rs`).
pub async fn worker(env: &Env, args: BenchWorkerArgs) -> Result<()> {
    let cfg = jobq::WorkerConfig {
        mode: jobq::Mode::Drain,
        concurrency: args.concurrency,
        batch_size: args.batch_size,
        ..Default::default()
    };
    let pool = env.pool(cfg.pool_size()).await?;
    let handlers = jobq::Handlers::new().register(&args.kind, |_job: jobq::JobContext| async {
        Ok::<(), jobq::JobError>(())
    })?;
    jobq::Worker::new(pool.clone(), handlers, cfg)?
        .run(CancellationToken::new())
        .await?;
    pool.close().await;
    Ok(())
}
