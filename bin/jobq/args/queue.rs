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
    /// The paused queues: since when, by whom, and why.
    List(QueueListArgs),
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
