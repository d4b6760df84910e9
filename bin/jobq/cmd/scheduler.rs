//! `jobq scheduler`.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use jobq::config::{HumanDuration, SchedulerSection};
use jobq::{Scheduler, SchedulerConfig};
use tracing::info;

use super::Env;
use crate::options::{MetricsArgs, human, parse_interval, set};

#[derive(Debug, Args)]
pub struct SchedulerArgs {
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Keep ticking until SIGTERM/SIGINT (registers in the process registry, creates startup runs).
    #[arg(long, conflicts_with = "once")]
    pub forever: bool,
    /// One pass, then exit (the default; for a crontab line). Startup runs are not made in this mode.
    #[arg(long)]
    pub once: bool,
    #[arg(long, value_parser = parse_interval, help = format!(
        "Time between ticks with --forever. Default: scheduler.interval from the config, else {}",
        human(SchedulerConfig::DEFAULT_INTERVAL)))]
    pub interval: Option<Duration>,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), help = format!(
        "Most jobs one tick creates. Default: scheduler.max_jobs_per_tick from the config, else {}",
        SchedulerConfig::DEFAULT_MAX_JOBS_PER_TICK))]
    pub max_jobs_per_tick: Option<u32>,
}

impl SchedulerArgs {
    /// Lays the flags given over the config file's `[scheduler]` section.
    pub fn overlay(&self, file: &mut SchedulerSection) {
        set(&mut file.interval, self.interval.map(HumanDuration));
        set(&mut file.max_jobs_per_tick, self.max_jobs_per_tick);
    }
}

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
