//! `jobq queue …`: pause, resume and list paused queues.

use clap::{Args, Subcommand};

use super::Format;

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Stop every worker, on every host, from claiming jobs of QUEUE (within a claim); running jobs
    /// finish, new jobs still go in. Remembered until `jobq queue resume`.
    Pause(PauseArgs),
    /// Let workers claim from QUEUE again.
    Resume(ResumeArgs),
    /// The paused queues (since when, by whom, why) and the queues pinned to hosts.
    List(QueueListArgs),
    /// Serve QUEUE only on these hosts (as `jobq stats` lists them): workers elsewhere leave it alone
    /// within a second. Adds to the hosts it is pinned to already.
    Pin(PinArgs),
    /// Serve QUEUE on every host again (or, with --host, no longer on that one).
    Unpin(UnpinArgs),
}

#[derive(Debug, Args)]
pub struct PinArgs {
    /// The queue to pin.
    pub queue: String,
    /// A host whose workers serve it (repeat for several).
    #[arg(long = "host", required = true)]
    pub hosts: Vec<String>,
}

#[derive(Debug, Args)]
pub struct UnpinArgs {
    /// The queue to unpin.
    pub queue: String,
    /// Only from this host.
    #[arg(long)]
    pub host: Option<String>,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The queue to pause.
    pub queue: String,
    /// Why (shown by `jobq queue list`, `stats` and the dashboard).
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The queue to resume.
    pub queue: String,
}

#[derive(Debug, Args)]
pub struct QueueListArgs {
    #[command(flatten)]
    pub format: Format,
}
