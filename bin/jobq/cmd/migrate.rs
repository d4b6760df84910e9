//! `jobq migrate`.

use anyhow::{Context, Result};
use clap::Args;

use super::Env;
use crate::out::outln;

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Create the URL's database first if it does not exist.
    #[arg(long)]
    pub create_database: bool,
}

pub async fn run(env: &Env, args: MigrateArgs) -> Result<()> {
    if args.create_database && jobq::create_database(env.connect_config()?).await? {
        outln!(
            "created database for {}",
            env.connect_config()?.redacted_url()
        )?;
    }
    let pool = env.pool(2).await?;
    // A migration that alters a big job_queue can take minutes; a spinner on a terminal says it is at
    // work (the server reports no progress for DDL). Nothing is drawn when stderr is not a terminal.
    let spinner = indicatif::ProgressBar::new_spinner().with_message("migrating");
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let report = jobq::migrate(&pool).await;
    spinner.finish_and_clear();
    let report = report.context("migration failed")?;
    if report.applied.is_empty() {
        outln!("schema is up to date (version {})", report.version)?;
    } else {
        outln!(
            "applied migration(s) {:?}; schema is at version {}",
            report.applied,
            report.version
        )?;
    }
    Ok(())
}
