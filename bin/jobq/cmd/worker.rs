//! `jobq worker`.

use anyhow::{Result, bail};
use jobq::{Mode, Worker, WorkerConfig};

use super::Env;
use crate::args::{WorkerArgs, WorkerOptions};

/// Worker settings from flags, then the config file, then the defaults (flags were checked as they
/// were parsed, the file when it was loaded).
pub fn config(env: &Env, args: &WorkerOptions, forever: bool) -> Result<WorkerConfig> {
    let mut config = env.config.clone();
    args.overlay(&mut config.worker);
    let mut cfg = config.worker()?;
    cfg.mode = if forever { Mode::Forever } else { Mode::Drain };
    Ok(cfg)
}

pub async fn run(env: &Env, args: WorkerArgs) -> Result<()> {
    crate::process::watch_parent()?;
    let cfg = config(env, &args.opts, args.forever)?;
    if env.config.handlers.is_empty() {
        match &env.config_path {
            Some(p) => bail!(
                "{} defines no handlers; add a [handlers.KIND] section with `command`, `sql`, `url` or `process`",
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
    if let Some(addr) = args.metrics.metrics_addr {
        crate::metrics::serve(addr, pool.clone(), shutdown.clone()).await?;
    }
    let handlers = env.config.handlers(&pool)?;
    let worker = Worker::new(pool.clone(), handlers, cfg)?;
    worker.run(shutdown).await?;
    pool.close().await;
    Ok(())
}
