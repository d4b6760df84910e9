//! `jobq bench`.

use crate::bench::{self, BenchConfig, Section};
use anyhow::{Result, bail};
use clap::Args;
use jobq::CancellationToken;

use super::Env;
use crate::out::{out, outln};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Jobs drained by the library drain (default 100000; 2000 with --quick).
    #[arg(long)]
    pub jobs: Option<u64>,

    /// The CI-sized run: tiny sizes and a reduced grid, to prove the bench works. Figures mean little.
    #[arg(long, conflicts_with = "smoke")]
    pub quick: bool,

    /// The smallest run, for tests: proves every section works end to end in a few seconds. Figures
    /// mean nothing.
    #[arg(long)]
    pub smoke: bool,

    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Sections to run (comma-separated): raw,drain,steady,big,idle,footprint,enqueue,web,cluster,backlog,
    /// languages.
    /// Default all (cluster only with --cluster).
    #[arg(long, value_delimiter = ',')]
    pub sections: Vec<String>,

    /// Finished rows kept in the table by the big-table section (default 1000000).
    #[arg(long)]
    pub big_rows: Option<u64>,

    /// Due rows of the backlog section's deep table (default 1000000), spread over 100 queues and 50
    /// kinds.
    #[arg(long)]
    pub backlog_rows: Option<u64>,

    /// Due rows of the small table the backlog section compares the deep one with (default 10000).
    #[arg(long)]
    pub backlog_small_rows: Option<u64>,

    /// The nodes of a Galera cluster (URLs, comma-separated; `scripts/galera.sh urls`): adds the cluster
    /// section, drains with a worker on 1, 2 and 3 of them.
    #[arg(long, value_delimiter = ',', value_name = "URL,URL,URL")]
    pub cluster: Vec<String>,

    /// Jobs per cluster drain (default 50000; 5000 with --quick).
    #[arg(long)]
    pub cluster_jobs: Option<u64>,

    /// Jobs per raw-SQL cell (default 10000; a quarter at 1 row per claim, twice from 100 rows).
    #[arg(long)]
    pub raw_jobs: Option<u64>,

    /// Drain settings to sweep instead of the built-in list, as WORKERS:CONCURRENCY:BATCH
    /// (comma-separated), e.g. `--sweep 1:10:10,2:1000:500`.
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<String>,

    /// Connections swept by the raw grid (comma-separated; default 1,2,4,8).
    #[arg(long, value_delimiter = ',')]
    pub raw_workers: Vec<u32>,

    /// Rows per claim swept by the raw grid (comma-separated; default 1,10,100,500,1000).
    #[arg(long, value_delimiter = ',')]
    pub raw_batches: Vec<u32>,

    /// Measure pickup latency at these rates (jobs/s, comma-separated) instead of searching for the
    /// sustainable rate.
    #[arg(long, value_delimiter = ',')]
    pub steady_rates: Vec<f64>,

    /// Worker settings (WORKERS:CONCURRENCY:BATCH) for the steady and big-table sections, instead of
    /// the drain's winner.
    #[arg(long)]
    pub settings: Option<String>,

    /// Keep the scratch database at the end (its name is printed).
    #[arg(long)]
    pub keep_db: bool,
}

#[derive(Debug, Args)]
pub struct BenchWorkerArgs {
    /// Jobs run at once.
    #[arg(long)]
    pub concurrency: u32,
    /// Most rows per claim.
    #[arg(long)]
    pub batch_size: u32,
    /// The kind the no-op handler serves.
    #[arg(long)]
    pub kind: String,
}

pub async fn run(env: &Env, args: BenchArgs) -> Result<()> {
    let json = args.json;
    let mut cfg = bench_config(env, args)?;
    // The footprint section runs this very binary as `jobq worker`, the drain as `__bench-worker`.
    cfg.jobq_exe = std::env::current_exe().ok();
    cfg.progress = !json;

    // SIGINT or SIGTERM: stop the run; the bench drops the scratch database before returning (a second
    // signal exits at once, and leaves it). Before, only Ctrl-C did, and a SIGTERM left the database.
    let stop = crate::process::on_signals()?;
    let interrupted = stop.clone();
    tokio::spawn(async move {
        interrupted.cancelled().await;
        crate::out::err_line(format_args!(
            "bench: interrupted; dropping the scratch database"
        ));
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
