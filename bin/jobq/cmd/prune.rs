//! `jobq prune`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use jobq::{Jobs, ReaperConfig};

use super::Env;
use crate::options::{human, parse_duration};
use crate::out::outln;

#[derive(Debug, Args)]
pub struct PruneArgs {
    #[arg(long, value_parser = parse_duration, help = format!(
        "Keep jobs that finished less than this long ago. Default: prune.retention from the config, \
         else {}", human(ReaperConfig::DEFAULT_RETENTION)))]
    pub retention: Option<Duration>,
}

/// How often the terminal's count of deleted jobs is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(120);

pub async fn run(env: &Env, args: PruneArgs) -> Result<()> {
    let pool = env.migrated_pool(super::ONE_OFF_CONNECTIONS).await?;
    let retention = args.retention.unwrap_or_else(|| env.config.retention());
    let age = humantime::format_duration(retention).to_string();
    // Pruning a long history takes a while (1,000 rows a statement, a few thousand rows a second): on a
    // terminal, a spinner counts the jobs deleted so far. Nothing is drawn when stderr is not a terminal.
    let spinner = indicatif::ProgressBar::new_spinner();
    let deleted = Arc::new(AtomicU64::new(0));
    let ticker = {
        let (spinner, deleted, age) = (spinner.clone(), deleted.clone(), age.clone());
        tokio::spawn(async move {
            loop {
                spinner.set_message(progress(&age, deleted.load(Ordering::Relaxed)));
                spinner.tick();
                tokio::time::sleep(PROGRESS_EVERY).await;
            }
        })
    };
    let n = Jobs::new(pool)
        .by(super::actor())
        .prune_counting(retention, &deleted)
        .await;
    ticker.abort();
    spinner.finish_and_clear();
    let n = n?;
    outln!("deleted {n} finished job(s) older than {age}")?;
    Ok(())
}

/// The spinner's line: what is pruned and how many jobs are gone so far.
fn progress(age: &str, deleted: u64) -> String {
    format!("pruning jobs that ended over {age} ago: {deleted} deleted so far")
}
