//! `jobq supervise`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use jobq::Reaper;
use jobq::config::Config;
use jobq::{CancellationToken, Scheduler};
use jobq::{Supervisor, SupervisorConfig, keep_alive};
use sqlx::MySqlPool;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::error;

use super::Env;
use super::worker::WorkerOptions;
use crate::options::MetricsArgs;

/// Most worker processes one supervisor keeps (`-n`): 1,000. Each worker holds an anchor connection
/// and a pool of its own (MariaDB allows 151 connections by default), and the supervisor sizes its
/// table of children by `-n` up front, so an absurd count must be refused, not attempted. More jobs at
/// once come from `--concurrency`, more processes from more nodes.
const MAX_WORKERS: u32 = 1_000;

#[derive(Debug, Args, Clone)]
pub struct SuperviseArgs {
    #[arg(short = 'n', long = "workers",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WORKERS)), help = format!(
        "Worker processes to keep alive (at most {MAX_WORKERS}; for more jobs at once raise --concurrency). \
         Default: `workers` from the config (per database with [databases.NAME] sections), else {}",
        SupervisorConfig::DEFAULT_WORKERS))]
    pub workers: Option<u32>,

    /// Also run a reaper in the supervisor's process, so one command runs a whole node.
    #[arg(long)]
    pub reaper: bool,

    /// Also run a scheduler in the supervisor's process (any number of schedulers may run at once).
    #[arg(long)]
    pub scheduler: bool,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    #[command(flatten)]
    pub opts: WorkerOptions,
}

mod many;

pub async fn run(env: &Env, args: SuperviseArgs) -> Result<()> {
    let shutdown = crate::process::on_signals()?;
    if env.serves_many() {
        return many::run(env, args, shutdown).await;
    }
    let reload = reload_on_sighup(
        env.config_path.clone(),
        env.database.clone(),
        args.opts.clone(),
    )?;
    serve(env, &args, shutdown, reload).await
}

/// Supervises the workers of one database (with its reaper and scheduler when asked for) until
/// `shutdown`, rolling them on each message from `reload`.
pub(super) async fn serve(
    env: &Env,
    args: &SuperviseArgs,
    shutdown: CancellationToken,
    reload: mpsc::Receiver<()>,
) -> Result<()> {
    if env.config.handlers.is_empty() {
        bail!(
            "no handlers configured: pass --config jobq.toml (or set JOBQ_CONFIG) with [handlers.KIND] sections"
        );
    }
    let worker_cfg = super::worker::config(env, &args.opts, true)?;
    env.config.check_programs()?;
    let pool = env.service_pool(super::SERVICE_CONNECTIONS)?;
    let mut cfg = supervisor_config(env, args)?;
    cfg.shutdown_grace = SupervisorConfig::shutdown_grace_for(worker_cfg.shutdown_grace);
    // With --metrics-addr, each child serves its own figures on a free loopback port and says where in
    // this directory; the supervisor's endpoint merges them (bin/jobq/scrape.rs).
    let metrics_dir = match args.metrics.metrics_addr {
        Some(_) => Some(children_metrics_dir(&mut cfg)?),
        None => None,
    };
    let supervisor = Supervisor::new(pool.clone(), cfg)?;
    if let Some(addr) = args.metrics.metrics_addr {
        crate::metrics::serve_with_children(
            addr,
            pool.clone(),
            shutdown.clone(),
            metrics_dir.clone(),
        )
        .await?;
    }
    let services = start_services(env, args, &pool, &shutdown)?;
    let result = supervisor.run(shutdown, reload).await;
    for s in services {
        let _ = s.await;
    }
    if let Some(dir) = &metrics_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    result?;
    pool.close().await;
    Ok(())
}

/// A fresh directory for the children's metrics addresses, and the flags and environment that make
/// each child serve and announce its figures there.
fn children_metrics_dir(cfg: &mut SupervisorConfig) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("jobq-supervise-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating {} for the workers' metrics", dir.display()))?;
    cfg.args.push("--metrics-addr".into());
    cfg.args.push("127.0.0.1:0".into());
    cfg.env.push((
        crate::scrape::METRICS_DIR_ENV.into(),
        dir.to_string_lossy().into_owned(),
    ));
    Ok(dir)
}

/// The children: this binary as `worker --forever` with the supervisor's worker flags and config file.
/// A child of a `[databases.NAME]` section is told its section and finds its URL there; otherwise it
/// gets the database URL as it was given (a password from a password file stays out of the children's
/// environment; they read the file themselves).
fn supervisor_config(env: &Env, args: &SuperviseArgs) -> Result<SupervisorConfig> {
    let program =
        std::env::current_exe().context("cannot find the jobq binary to start workers")?;
    let workers = args
        .workers
        .or(env.config.workers)
        .unwrap_or(SupervisorConfig::DEFAULT_WORKERS);
    let mut cfg = env
        .config
        .supervisor
        .apply(SupervisorConfig::new(workers, program))
        .map_err(|e| anyhow::anyhow!(e))?;
    cfg.args = child_args(&args.opts);
    if let Some(path) = &env.config_path {
        let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        cfg.args.push("--config".into());
        cfg.args.push(abs.to_string_lossy().into_owned());
    }
    match &env.database {
        Some(name) => cfg.env = vec![("JOBQ_DATABASE".into(), name.clone())],
        None => cfg.env = vec![("JOBQ_DATABASE_URL".into(), env.given_url()?.to_string())],
    }
    Ok(cfg)
}

/// A message on the returned channel for each SIGHUP whose config file passes [`check_reload`].
///
/// A roll replaces every worker by one that reads the file anew: with a broken file each new worker
/// would exit at once and the node would stop working. So the file is checked here first, as a worker
/// would check it, and a broken one leaves the current workers running.
fn reload_on_sighup(
    config_path: Option<PathBuf>,
    database: Option<String>,
    opts: WorkerOptions,
) -> Result<mpsc::Receiver<()>> {
    let (reload_tx, reload_rx) = mpsc::channel(1);
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match check_reload(config_path.as_deref(), database.as_deref(), &opts) {
                Ok(()) => {
                    let _ = reload_tx.try_send(());
                }
                Err(e) => error!(
                    error = format!("{e:#}"),
                    "SIGHUP: the config is invalid; keeping the current workers (fix it and send SIGHUP again)"
                ),
            }
        }
    });
    Ok(reload_rx)
}

/// The reaper and the scheduler, when asked for, run in this process beside the workers; each is
/// started again if it fails or panics.
fn start_services(
    env: &Env,
    args: &SuperviseArgs,
    pool: &MySqlPool,
    shutdown: &CancellationToken,
) -> Result<Vec<JoinHandle<()>>> {
    const RESTART_AFTER: Duration = Duration::from_secs(1);
    let mut services = Vec::new();
    if args.reaper {
        let mut cfg = env.config.reaper()?;
        cfg.validate()?;
        cfg.database_gauges = args.metrics.metrics_addr.is_some();
        let (pool, stop) = (pool.clone(), shutdown.clone());
        services.push(keep_alive(
            "reaper",
            RESTART_AFTER,
            shutdown.clone(),
            move || {
                let (pool, cfg, stop) = (pool.clone(), cfg.clone(), stop.clone());
                async move { Reaper::new(pool, cfg)?.run(stop).await }
            },
        ));
    }
    if args.scheduler {
        let cfg = env.config.scheduler().context("config [schedules]")?;
        // Checked once here, so that a bad definition is an error at start rather than a restart loop.
        Scheduler::new(pool.clone(), cfg.clone())?;
        let (pool, stop) = (pool.clone(), shutdown.clone());
        services.push(keep_alive(
            "scheduler",
            RESTART_AFTER,
            shutdown.clone(),
            move || {
                let (pool, cfg, stop) = (pool.clone(), cfg.clone(), stop.clone());
                async move { Scheduler::new(pool, cfg)?.run(stop).await }
            },
        ));
    }
    Ok(services)
}

/// Checks what a new worker would check at start-up with the config file as it is now: the file itself
/// (syntax, keys, handler and schedule sections), the worker settings it makes with the supervisor's
/// flags, and the handlers' programs.
pub(super) fn check_reload(
    config_path: Option<&Path>,
    database: Option<&str>,
    opts: &WorkerOptions,
) -> Result<()> {
    let file = match config_path {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let mut config = match database {
        Some(name) => file.database(name)?.clone(),
        None => file,
    };
    if config.handlers.is_empty() {
        bail!(
            "the config defines no handlers; add a [handlers.KIND] section with `command`, `sql`, `url` or `process`"
        );
    }
    config.check_programs()?;
    opts.overlay(&mut config.worker);
    config.worker()?;
    Ok(())
}

/// Each child's arguments: `worker --forever` and the worker flags the supervisor was given.
fn child_args(o: &WorkerOptions) -> Vec<String> {
    let mut a = vec!["worker".to_string(), "--forever".to_string()];
    a.extend(o.to_flags());
    a
}
