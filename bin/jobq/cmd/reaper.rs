//! `jobq reaper`.

use anyhow::Result;
use jobq::{Reaper, ReaperConfig};

use super::Env;
use crate::args::ReaperArgs;
use crate::out::outln;

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
