//! `jobq prune`.

use anyhow::Result;
use jobq::Jobs;

use super::Env;
use crate::args::PruneArgs;
use crate::out::outln;

pub async fn run(env: &Env, args: PruneArgs) -> Result<()> {
    let pool = env.migrated_pool(2).await?;
    let retention = args.retention.unwrap_or_else(|| env.config.retention());
    let n = Jobs::new(pool).prune(retention).await?;
    outln!(
        "deleted {n} finished job(s) older than {}",
        humantime::format_duration(retention)
    )?;
    Ok(())
}
