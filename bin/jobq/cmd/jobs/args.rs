//! The arguments of `jobq jobs`: the subcommands, and the filters `list` and `bulk` share.

use clap::{Args, Subcommand};

use crate::options::Format;

/// Jobs `jobs list` shows unless told: a screenful.
const LIST_LIMIT: u32 = 20;

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Newest jobs first.
    List(ListArgs),
    /// Every column of one job.
    Show {
        /// Job id.
        id: u64,
        #[command(flatten)]
        format: Format,
    },
    /// The output a job left (JSON, as its handler recorded it), on one line; fails when it left none.
    Output {
        /// Job id.
        id: u64,
    },
    /// Run a done, dead, cancelled or retry job again now, with a fresh attempt budget (attempts start
    /// again at 0; the attempts used so far are noted in last_error). A job waiting for other jobs runs
    /// now without waiting for them.
    Retry {
        /// Job id.
        id: u64,
    },
    /// Make a queued job, or one waiting for its retry, due now (its attempts are unchanged).
    RunNow {
        /// Job id.
        id: u64,
    },
    /// Cancel a job: at once if it has not started (queued, retry, waiting); a running job's worker is
    /// asked to stop it. Jobs waiting for it are cancelled too.
    Cancel {
        /// Job id.
        id: u64,
    },
    /// Retry, cancel, run now or delete every job matching a filter (at most --limit), one by one. Without
    /// --yes it only says how many jobs match. A filter is required (--state, --queue, --kind,
    /// --error); --all takes every job instead.
    Bulk(BulkArgs),
}

#[derive(Debug, Args)]
pub struct BulkArgs {
    /// What to do: retry, cancel, run-now, delete.
    #[arg(value_parser = clap::value_parser!(jobq::admin::JobAction))]
    pub action: jobq::admin::JobAction,
    #[command(flatten)]
    pub filter: JobFilterArgs,
    /// Only jobs whose last error contains this text.
    #[arg(long)]
    pub error: Option<String>,
    /// Refuse when more jobs than this match (narrow the filter, or raise it): nothing is done then.
    #[arg(long, default_value_t = jobq::Jobs::DEFAULT_BULK_LIMIT, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Every job, on purpose: without a filter the command refuses unless this is given.
    #[arg(long, conflicts_with_all = ["state", "queue", "kind", "error"])]
    pub all: bool,
    /// Do it; without it the command only counts the jobs that match.
    #[arg(long)]
    pub yes: bool,
}

/// The filters `jobs list` and `jobs bulk` share.
#[derive(Debug, Args)]
pub struct JobFilterArgs {
    /// Only this state: waiting, queued, running, done, retry, dead, cancelled.
    #[arg(long, short = 's', value_parser = clap::value_parser!(jobq::State))]
    pub state: Option<jobq::State>,
    /// Only this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only this kind.
    #[arg(long, short = 'k')]
    pub kind: Option<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub format: Format,
    #[command(flatten)]
    pub filter: JobFilterArgs,
    /// At most this many.
    #[arg(long, short = 'n', default_value_t = LIST_LIMIT, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
}
