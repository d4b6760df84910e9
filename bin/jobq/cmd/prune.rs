//! `jobq prune`.

use anyhow::Result;
use jobq::Jobs;

use super::Env;
use crate::args::PruneArgs;
use crate::out::outln;

pub async fn run(env: &Env, args: PruneArgs) -> Result<()> {
    let pool = env.migrated_pool(super::ONE_OFF_CONNECTIONS).await?;
    let retention = args.retention.unwrap_or_else(|| env.config.retention());
    // Pruning a long history takes a while (1,000 rows a statement): a spinner on a terminal says it
    // is at work. Nothing is drawn when stderr is not a terminal.
    let spinner = indicatif::ProgressBar::new_spinner().with_message(format!(
        "pruning jobs that ended over {} ago",
        humantime::format_duration(retention)
    ));
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let n = Jobs::new(pool).prune(retention).await;
    spinner.finish_and_clear();
    let n = n?;
    outln!(
        "deleted {n} finished job(s) older than {}",
        humantime::format_duration(retention)
    )?;
    Ok(())
}
