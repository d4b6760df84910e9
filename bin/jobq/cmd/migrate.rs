//! `jobq migrate`.

use anyhow::{Context, Result};

use super::Env;
use crate::args::MigrateArgs;
use crate::out::outln;

pub async fn run(env: &Env, args: MigrateArgs) -> Result<()> {
    if args.create_database && jobq::create_database(&env.url).await? {
        outln!("created database for {}", jobq::redact_url(&env.url))?;
    }
    let pool = env.pool(2).await?;
    let report = jobq::migrate(&pool).await.context("migration failed")?;
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
