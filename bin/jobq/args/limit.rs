//! `jobq limit …`: global concurrency limits.

use clap::{Args, Subcommand};

use std::time::Duration;

use super::Format;

#[derive(Debug, Subcommand)]
pub enum LimitCommand {
    /// At most N jobs of a kind (or of a queue) run at once, across every worker of every host, or with
    /// --per start per period; 0 holds them. Takes effect within a second; running jobs are never
    /// stopped.
    Set(LimitSetArgs),
    /// Remove a limit (the rate over --per, or the limit at once).
    Remove(LimitTarget),
    /// The limits.
    List(LimitListArgs),
}

/// Which kind or queue a limit is on.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["kind", "queue"])))]
pub struct LimitTarget {
    /// Limit the jobs of this kind, in any queue.
    #[arg(long)]
    pub kind: Option<String>,
    /// Limit the jobs of this queue, of any kind.
    #[arg(long)]
    pub queue: Option<String>,
    /// A rate limit: N jobs start per this period (`1s`, `1m`, `1h`; whole seconds up to a week).
    #[arg(long, value_name = "PERIOD", value_parser = super::parse_duration)]
    pub per: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct LimitSetArgs {
    #[command(flatten)]
    pub target: LimitTarget,
    /// Most jobs running at once (or starting per --per).
    pub max_jobs: u32,
}

#[derive(Debug, Args)]
pub struct LimitListArgs {
    #[command(flatten)]
    pub format: Format,
}
