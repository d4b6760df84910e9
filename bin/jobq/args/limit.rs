//! `jobq limit …`: global concurrency limits.

use clap::{Args, Subcommand};

use super::Format;

#[derive(Debug, Subcommand)]
pub enum LimitCommand {
    /// At most N jobs of a kind (or of a queue) run at once, across every worker of every host; 0 holds
    /// them. Takes effect within a second; running jobs are never stopped.
    Set(LimitSetArgs),
    /// Remove a limit.
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
}

#[derive(Debug, Args)]
pub struct LimitSetArgs {
    #[command(flatten)]
    pub target: LimitTarget,
    /// Most jobs running at once.
    pub max_running: u32,
}

#[derive(Debug, Args)]
pub struct LimitListArgs {
    #[command(flatten)]
    pub format: Format,
}
