//! `jobq enable` and `jobq disable`: jobq's schema in and out of a configured database.

use anyhow::{Context, Result};
use clap::Args;

use super::Env;
use crate::out::outln;

#[derive(Debug, Args)]
pub struct EnableArgs {
    /// The [databases.NAME] section of the config file.
    #[arg(value_name = "DATABASE")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct DisableArgs {
    /// The [databases.NAME] section of the config file.
    #[arg(value_name = "DATABASE")]
    pub name: String,

    /// Remove the schema even while jobq processes live or jobs are unfinished there (they are lost).
    #[arg(long)]
    pub force: bool,
}

/// Creates the section's database if it is missing, then migrates it.
pub async fn enable(env: &Env, args: EnableArgs) -> Result<()> {
    let db = Env::section(&env.config, env.config_path.clone(), &args.name)?;
    let url = db.connect_config()?.redacted_url();
    if jobq::create_database(db.connect_config()?).await? {
        outln!("created database {}", url)?;
    }
    let pool = db.pool(2).await?;
    let report = jobq::migrate(&pool)
        .await
        .with_context(|| format!("enabling jobq in {}", args.name))?;
    outln!(
        "jobq is enabled in {} ({}): schema version {}{}",
        args.name,
        url,
        report.version,
        if report.applied.is_empty() {
            ", already current".to_string()
        } else {
            format!(", applied {:?}", report.applied)
        }
    )?;
    pool.close().await;
    Ok(())
}

/// Drops jobq's objects from the section's database (see [`jobq::uninstall`]).
pub async fn disable(env: &Env, args: DisableArgs) -> Result<()> {
    let db = Env::section(&env.config, env.config_path.clone(), &args.name)?;
    let pool = db.pool(2).await?;
    let report = jobq::uninstall(&pool, args.force).await?;
    if report.dropped.is_empty() {
        outln!(
            "jobq was not installed in {} (database {}); nothing to remove",
            args.name,
            report.database
        )?;
    } else {
        outln!(
            "jobq is disabled in {} (database {}): dropped {}",
            args.name,
            report.database,
            report.dropped.join(", ")
        )?;
    }
    pool.close().await;
    Ok(())
}
