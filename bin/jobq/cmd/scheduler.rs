//! `jobq scheduler`.

use anyhow::{Context, Result};
use jobq::{Scheduler, SchedulerConfig};
use tracing::info;

use super::Env;
use crate::args::SchedulerArgs;

/// The scheduler's settings from flags, then the config file (`[scheduler]`, and the `[schedules.NAME]`
/// sections as its definitions), then the defaults.
pub fn config(env: &Env, args: &SchedulerArgs) -> Result<SchedulerConfig> {
    let mut config = env.config.clone();
    args.overlay(&mut config.scheduler);
    config.scheduler().context("config [schedules]")
}

pub async fn run(env: &Env, args: SchedulerArgs) -> Result<()> {
    let cfg = config(env, &args)?;
    if args.forever {
        let stop = crate::process::on_signals()?;
        let pool = env.service_pool(super::SERVICE_CONNECTIONS)?;
        if let Some(addr) = args.metrics.metrics_addr {
            crate::metrics::serve(addr, pool.clone(), stop.clone()).await?;
        }
        Scheduler::new(pool.clone(), cfg)?.run(stop).await?;
        pool.close().await;
        return Ok(());
    }
    // One pass for cron: sync the config, tick once. No registry row and no startup runs (cron starts
    // this every minute; a startup run each time would be a run a minute).
    let pool = env.migrated_pool(super::ONE_OFF_CONNECTIONS).await?;
    let scheduler = Scheduler::new(pool.clone(), cfg)?;
    scheduler.sync_definitions().await?;
    let r = scheduler.run_once().await?;
    info!(
        created = r.created,
        skipped = r.skipped,
        held = r.held,
        finished = r.finished,
        ended_runs = r.ended_runs,
        "scheduler pass done"
    );
    pool.close().await;
    Ok(())
}
