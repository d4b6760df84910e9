//! `jobq enqueue` and `jobq jobs`: putting one job in, and looking at or acting on jobs already in.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{Format, parse_duration};

/// Jobs `jobs list` shows unless told: a screenful.
const LIST_LIMIT: u32 = 20;

#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// Job kind: picks the handler.
    pub kind: String,

    /// JSON payload. Default {}.
    #[arg(long, short = 'p')]
    pub payload: Option<String>,

    /// Queue. Default "default".
    #[arg(long)]
    pub queue: Option<String>,

    /// Priority: smaller runs first. Default 0.
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i16>,

    /// Due at this time: RFC 3339 (2026-05-01T12:00:00Z) or "YYYY-MM-DD HH:MM:SS" in UTC.
    #[arg(long, conflicts_with = "run_in")]
    pub run_at: Option<String>,

    /// Due after this long (e.g. 30s, 5m, 2h).
    #[arg(long = "in", value_parser = parse_duration)]
    pub run_in: Option<Duration>,

    /// Attempts before the job is dead. Default 20.
    #[arg(long)]
    pub max_attempts: Option<u16>,

    /// Run-time limit of one attempt (e.g. 90s).
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,

    /// Unique key (up to 255 bytes): while a job with this key is queued, waiting to retry or running,
    /// print that job's id instead of inserting another.
    #[arg(long)]
    pub unique_key: Option<String>,

    /// With --unique-key: a done job with the key also holds it for this long after it finished
    /// (e.g. 1h).
    #[arg(long, value_parser = parse_duration, requires = "unique_key")]
    pub unique_for: Option<Duration>,

    /// Job ids this job waits for (comma-separated): it runs once every one is done (the last one's
    /// finish queues it), and is cancelled if one ends dead or cancelled.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "ID,ID",
        conflicts_with = "after_ended"
    )]
    pub after: Vec<u64>,

    /// A batch callback: job ids this job waits for until each has ended in any way (done, dead or
    /// cancelled); it then runs once with "jobq_batch": {"done": N, "dead": N, "cancelled": N} added to
    /// its payload.
    #[arg(long, value_delimiter = ',', value_name = "ID,ID")]
    pub after_ended: Vec<u64>,
    #[command(flatten)]
    pub format: Format,
}

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
