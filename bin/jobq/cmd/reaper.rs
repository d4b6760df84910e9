//! `jobq reaper`.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use jobq::config::{HumanDuration, ReaperSection};
use jobq::{Reaper, ReaperConfig};

use super::Env;
use crate::options::{MetricsArgs, human, parse_interval, set};
use crate::out::outln;

#[derive(Debug, Args)]
pub struct ReaperArgs {
    /// One pass, then exit (for cron). Without it the reaper runs until SIGTERM/SIGINT.
    #[arg(long, conflicts_with = "forever")]
    pub once: bool,

    /// Run until SIGTERM/SIGINT (the default).
    #[arg(long)]
    pub forever: bool,

    #[arg(long, value_parser = parse_interval, help = format!(
        "Time between passes. Default: reaper.interval from the config, else {}",
        human(ReaperConfig::DEFAULT_INTERVAL)))]
    pub interval: Option<Duration>,

    #[arg(long, value_parser = parse_interval, help = format!(
        "A claimant whose heartbeat is older than this is gone (at least three worker heartbeats). \
         Default: reaper.lease, else {}", human(ReaperConfig::DEFAULT_LEASE)))]
    pub lease: Option<Duration>,

    /// Trust only heartbeats, not database sessions (for connections through a multiplexing proxy).
    #[arg(long)]
    pub no_session_signals: bool,

    #[command(flatten)]
    pub metrics: MetricsArgs,
}

impl ReaperArgs {
    /// Lays the flags given over the config file's `[reaper]` section.
    pub fn overlay(&self, file: &mut ReaperSection) {
        set(&mut file.interval, self.interval.map(HumanDuration));
        set(&mut file.lease, self.lease.map(HumanDuration));
        if self.no_session_signals {
            file.session_signals = Some(false);
        }
    }
}

/// The reaper's settings from flags, then the config file, then the defaults.
pub fn config(env: &Env, args: &ReaperArgs) -> Result<ReaperConfig> {
    let mut config = env.config.clone();
    args.overlay(&mut config.reaper);
    let cfg = config.reaper()?;
    cfg.validate()?;
    Ok(cfg)
}

pub async fn run(env: &Env, args: ReaperArgs) -> Result<()> {
    let mut cfg = config(env, &args)?;
    // The database gauges cost a dozen queries every 15 s; read them only when something serves them.
    cfg.database_gauges = args.metrics.metrics_addr.is_some() && !args.once;
    // A sidecar waits for a database that is not there yet; a one-off pass fails at once.
    let pool = if args.once {
        env.migrated_pool(super::SERVICE_CONNECTIONS).await?
    } else {
        env.service_pool(super::SERVICE_CONNECTIONS)?
    };
    let reaper = Reaper::new(pool.clone(), cfg)?;
    if args.once {
        let report = reaper.run_once().await?;
        outln!(
            "dead claimants: {}, jobs requeued: {}, jobs ended: {}, registry rows removed: {}, jobs pruned: {}",
            report.dead_claimants,
            report.requeued,
            report.ended,
            report.forgotten,
            report.pruned
        )?;
    } else {
        let shutdown = crate::process::on_signals()?;
        if let Some(addr) = args.metrics.metrics_addr {
            crate::metrics::serve(addr, pool.clone(), shutdown.clone()).await?;
        }
        reaper.run(shutdown).await?;
    }
    pool.close().await;
    Ok(())
}
