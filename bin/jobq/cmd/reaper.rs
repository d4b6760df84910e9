//! `jobq reaper`.

use anyhow::Result;
use jobq::config::check_positive;
use jobq::reaper::{Reaper, ReaperConfig};

use super::Env;
use crate::args::ReaperArgs;
use crate::out::outln;

/// The reaper's settings from flags, then the config file, then the defaults. The file's values were
/// checked when it was loaded; a zero flag is refused here (a zero interval would panic the timer, and a
/// zero lease would judge every claimant dead).
pub fn config(env: &Env, args: &ReaperArgs) -> Result<ReaperConfig> {
    check_positive("--interval", args.interval).map_err(anyhow::Error::msg)?;
    check_positive("--lease", args.lease).map_err(anyhow::Error::msg)?;
    let file = &env.config.reaper;
    let d = ReaperConfig::default();
    Ok(ReaperConfig {
        interval: args
            .interval
            .or(file.interval.map(|x| x.0))
            .unwrap_or(d.interval),
        lease: args.lease.or(file.lease.map(|x| x.0)).unwrap_or(d.lease),
        session_signals: !args.no_session_signals && file.session_signals.unwrap_or(true),
        heartbeat_interval: env
            .config
            .worker
            .heartbeat_interval
            .map_or(d.heartbeat_interval, |x| x.0),
        retention: Some(env.config.retention()),
        unserved_after: file.unserved_after.map_or(d.unserved_after, |x| x.0),
        ..d
    })
}

pub async fn run(env: &Env, args: ReaperArgs) -> Result<()> {
    let cfg = config(env, &args)?;
    cfg.validate()?;
    // A sidecar waits for a database that is not there yet; a one-off pass fails at once.
    let pool = if args.once {
        env.migrated_pool(4).await?
    } else {
        env.service_pool(4)?
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
        reaper.run(shutdown).await?;
    }
    pool.close().await;
    Ok(())
}
