//! `jobq scheduler`.

use anyhow::{Context, Result};
use jobq::{Scheduler, SchedulerConfig};
use tracing::info;

use super::Env;
use crate::args::SchedulerArgs;

/// The scheduler's settings from flags, then the config file (its `[schedules.NAME]` sections), then the
/// defaults.
pub fn config(env: &Env, args: &SchedulerArgs) -> Result<SchedulerConfig> {
    // `[schedules.NAME]` sections were validated when the config was loaded.
    let definitions = env
        .config
        .schedules
        .iter()
        .map(|(name, s)| s.to_def(name))
        .collect::<Result<Vec<_>, _>>()
        .context("config [schedules]")?;
    let defaults = SchedulerConfig::default();
    let cfg = SchedulerConfig {
        interval: args.interval.unwrap_or(defaults.interval),
        max_jobs_per_tick: args.max_jobs_per_tick.unwrap_or(defaults.max_jobs_per_tick),
        definitions,
        ..defaults
    };
    Ok(cfg)
}

pub async fn run(env: &Env, args: SchedulerArgs) -> Result<()> {
    let cfg = config(env, &args)?;
    if args.forever {
        let stop = crate::process::on_signals()?;
        let pool = env.service_pool(4)?;
        Scheduler::new(pool.clone(), cfg)?.run(stop).await?;
        pool.close().await;
        return Ok(());
    }
    // One pass for cron: sync the config, tick once. No registry row and no startup runs (cron starts
    // this every minute; a startup run each time would be a run a minute).
    let pool = env.migrated_pool(2).await?;
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
