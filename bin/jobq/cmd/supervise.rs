//! `jobq supervise`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use jobq::Scheduler;
use jobq::config::Config;
use jobq::reaper::Reaper;
use jobq::supervisor::{Supervisor, SupervisorConfig, keep_alive};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::error;

use super::Env;
use crate::args::{ReaperArgs, SchedulerArgs, SuperviseArgs, WorkerOptions};

/// Most worker processes one supervisor keeps (`-n`): 1,000. Each worker holds an anchor connection
/// and a pool of its own (MariaDB allows 151 connections by default), and the supervisor sizes its
/// table of children by `-n` up front, so an absurd count must be refused, not attempted. More jobs at
/// once come from `--concurrency`, more processes from more nodes.
const MAX_WORKERS: u32 = 1_000;

pub async fn run(env: &Env, args: SuperviseArgs) -> Result<()> {
    if args.workers == 0 || args.workers > MAX_WORKERS {
        bail!(
            "-n/--workers = {} is outside 1..={MAX_WORKERS}; for more jobs at once raise --concurrency",
            args.workers
        );
    }
    if env.config.handlers.is_empty() {
        bail!(
            "no handlers configured: pass --config jobq.toml (or set JOBQ_CONFIG) with [handlers.KIND] sections"
        );
    }
    let worker_cfg = super::worker::config(env, &args.opts, true)?;
    env.config.check_programs()?;
    let pool = env.service_pool(4)?;
    let program =
        std::env::current_exe().context("cannot find the jobq binary to start workers")?;
    let mut cfg = SupervisorConfig::new(args.workers, program);
    cfg.args = child_args(&args.opts);
    if let Some(path) = &env.config_path {
        let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        cfg.args.push("--config".into());
        cfg.args.push(abs.to_string_lossy().into_owned());
    }
    // The URL as given: a password from a password file stays out of the children's environment (they
    // read the file themselves).
    cfg.env = vec![("JOBQ_DATABASE_URL".into(), env.given_url.clone())];
    cfg.shutdown_grace = worker_cfg.shutdown_grace + std::time::Duration::from_secs(5);
    let supervisor = Supervisor::new(pool.clone(), cfg)?;

    let shutdown = crate::process::on_signals()?;
    let (reload_tx, reload_rx) = mpsc::channel(1);
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let config_path = env.config_path.clone();
    let opts = args.opts.clone();
    let url = env.url.clone();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // A roll replaces every worker by one that reads the file anew: with a broken file each new
            // worker would exit at once and the node would stop working. So the file is checked here
            // first, as a worker would check it, and a broken one leaves the current workers running.
            match check_reload(config_path.as_deref(), &opts, &url) {
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

    // The reaper and the scheduler run in this process beside the workers; each is started again if
    // it fails or panics.
    const RESTART_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
    let mut services = Vec::new();
    if args.reaper {
        let reaper_args = ReaperArgs {
            once: false,
            forever: true,
            interval: None,
            lease: None,
            no_session_signals: false,
        };
        let cfg = super::reaper::config(env, &reaper_args)?;
        cfg.validate()?;
        let pool = pool.clone();
        services.push(keep_alive("reaper", RESTART_AFTER, shutdown.clone(), {
            let shutdown = shutdown.clone();
            move || {
                let (pool, cfg, shutdown) = (pool.clone(), cfg.clone(), shutdown.clone());
                async move { Reaper::new(pool, cfg)?.run(shutdown).await }
            }
        }));
    }
    if args.scheduler {
        let sched_args = SchedulerArgs {
            forever: true,
            once: false,
            interval: None,
            max_jobs_per_tick: None,
        };
        let cfg = super::scheduler::config(env, &sched_args)?;
        // Checked once here, so that a bad definition is an error at start rather than a restart loop.
        Scheduler::new(pool.clone(), cfg.clone())?;
        let pool = pool.clone();
        services.push(keep_alive("scheduler", RESTART_AFTER, shutdown.clone(), {
            let shutdown = shutdown.clone();
            move || {
                let (pool, cfg, shutdown) = (pool.clone(), cfg.clone(), shutdown.clone());
                async move { Scheduler::new(pool, cfg)?.run(shutdown).await }
            }
        }));
    }
    supervisor.run(shutdown, reload_rx).await?;
    for s in services {
        let _ = s.await;
    }
    pool.close().await;
    Ok(())
}

/// Checks what a new worker would check at start-up with the config file as it is now: the file itself
/// (syntax, keys, handler and schedule sections), the worker settings it makes with the supervisor's
/// flags, and the handlers' programs.
fn check_reload(config_path: Option<&Path>, opts: &WorkerOptions, url: &str) -> Result<()> {
    let config = match config_path {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if config.handlers.is_empty() {
        bail!(
            "the config defines no handlers; add a [handlers.KIND] section with `command` or `sql`"
        );
    }
    config.check_programs()?;
    let env = Env {
        config,
        config_path: config_path.map(Path::to_path_buf),
        url: url.to_string(),
        given_url: url.to_string(),
    };
    super::worker::config(&env, opts, true)?;
    Ok(())
}

/// Each child's arguments: `worker --forever` and the worker flags the supervisor was given.
fn child_args(o: &WorkerOptions) -> Vec<String> {
    let mut a = vec!["worker".to_string(), "--forever".to_string()];
    let d = |d: std::time::Duration| humantime::format_duration(d).to_string();
    if !o.queues.is_empty() {
        a.push(format!("--queue={}", o.queues.join(",")));
    }
    if let Some(c) = o.concurrency {
        a.push(format!("--concurrency={c}"));
    }
    if let Some(b) = o.batch_size {
        a.push(format!("--batch-size={b}"));
    }
    if let Some(p) = o.poll_interval {
        a.push(format!("--poll-interval={}", d(p)));
    }
    if let Some(g) = o.shutdown_grace {
        a.push(format!("--shutdown-grace={}", d(g)));
    }
    if let Some(t) = o.default_timeout {
        a.push(format!("--default-timeout={}", d(t)));
    }
    a
}
