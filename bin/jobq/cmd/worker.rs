//! `jobq worker`.

use anyhow::{Result, bail};
use jobq::config::{check_concurrency, check_positive};
use jobq::{Handlers, Mode, Worker, WorkerConfig};

use super::Env;
use crate::args::{WorkerArgs, WorkerOptions};

/// Worker settings from flags, then the config file, then the defaults. Checked here, before anything
/// connects: the file's values were checked when it was loaded, so what fails here is a flag.
pub fn config(env: &Env, args: &WorkerOptions, forever: bool) -> Result<WorkerConfig> {
    check_concurrency("--concurrency", args.concurrency).map_err(anyhow::Error::msg)?;
    if args.batch_size == Some(0) {
        bail!("--batch-size must be at least 1");
    }
    check_positive("--poll-interval", args.poll_interval).map_err(anyhow::Error::msg)?;
    let retry = env.config.retry_policy().map_err(anyhow::Error::msg)?;
    let args = args.clone();
    let file = &env.config.worker;
    let defaults = WorkerConfig::default();
    Ok(WorkerConfig {
        queues: if !args.queues.is_empty() {
            args.queues
        } else {
            file.queues.clone().unwrap_or(defaults.queues)
        },
        concurrency: args
            .concurrency
            .or(file.concurrency)
            .unwrap_or(defaults.concurrency),
        batch_size: args
            .batch_size
            .or(file.batch_size)
            .unwrap_or(defaults.batch_size),
        mode: if forever { Mode::Forever } else { Mode::Drain },
        poll_interval: args
            .poll_interval
            .or(file.poll_interval.map(|d| d.0))
            .unwrap_or(defaults.poll_interval),
        shutdown_grace: args
            .shutdown_grace
            .or(file.shutdown_grace.map(|d| d.0))
            .unwrap_or(defaults.shutdown_grace),
        default_timeout: args
            .default_timeout
            .or(file.default_timeout.map(|d| d.0))
            .unwrap_or(defaults.default_timeout),
        heartbeat_interval: file
            .heartbeat_interval
            .map_or(defaults.heartbeat_interval, |d| d.0),
        fence_after: file.fence_after.map_or(defaults.fence_after, |d| d.0),
        retry,
        ..defaults
    })
}

pub async fn run(env: &Env, args: WorkerArgs) -> Result<()> {
    crate::process::watch_parent()?;
    let cfg = config(env, &args.opts, args.forever)?;
    if env.config.handlers.is_empty() {
        match &env.config_path {
            Some(p) => bail!(
                "{} defines no handlers; add a [handlers.KIND] section with `command` or `sql`",
                p.display()
            ),
            None => bail!(
                "no config file: pass --config jobq.toml (or set JOBQ_CONFIG) with [handlers.KIND] sections"
            ),
        }
    }
    // A handler whose program is missing would fail every job of its kind; say so before starting.
    env.config.check_programs()?;
    let shutdown = crate::process::on_signals()?;
    // A forever worker waits for a database that is not there yet (it checks the schema when it
    // registers); a draining one (cron) fails at once, and the next tick tries again.
    let pool = if args.forever {
        env.service_pool(cfg.pool_size())?
    } else {
        env.migrated_pool(cfg.pool_size()).await?
    };
    let handlers = Handlers::from_config(&env.config, &pool)?;
    let worker = Worker::new(pool.clone(), handlers, cfg)?;
    worker.run(shutdown).await?;
    pool.close().await;
    Ok(())
}
