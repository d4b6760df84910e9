//! The arguments of `jobq schedule`: its subcommands, the spec grammar of their help, and the options
//! `create` and `update` share.

use std::time::Duration;

use clap::{Args, Subcommand};
use jobq::schedule::{Misfire, OnError, Overlap};

use crate::options::{Format, JobHelp, JobOptions, NoDue, parse_duration};

/// Runs `schedule show` lists under the definition unless told: the latest few.
const SHOW_RUNS: u32 = 10;
/// Runs `schedule runs` lists unless told: a screenful.
const RUNS_LIMIT: u32 = 20;
/// Times `schedule next` prints unless told: enough to see the pattern.
const NEXT_COUNT: usize = 5;
/// Changes `schedule log` lists unless told.
const LOG_LIMIT: u32 = 50;

/// The spec grammar, shown by `jobq schedule create --help`.
const SPEC_HELP: &str = "SPEC is one of:\n  \
    a cron expression, 5 fields (\"30 2 * * *\") or 6 with seconds first (\"*/10 * * * * *\"); L, #, W, \
    names and @daily-style nicknames work\n  \
    every 5m                      a fixed interval, anchored to the start (never drifts)\n  \
    daily at 02:30                weekly on mon at 09:00\n  \
    monthly on 1 at 00:00         monthly on -1 at 23:00 (the last day of the month)\n  \
    once at 2030-01-01 12:00      a single run (local time in --tz, or RFC 3339)\n\
    Wall-clock specs are read in --tz (default UTC). Check a spec with `jobq schedule next --spec SPEC`.";

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule (nothing is written if the spec or an option is invalid).
    #[command(after_help = SPEC_HELP)]
    Create(ScheduleCreateArgs),
    /// Change a schedule. A new spec, time zone or window recomputes its next run from now; other changes
    /// keep its state and next run.
    #[command(after_help = SPEC_HELP)]
    Update(ScheduleUpdateArgs),
    /// Delete a schedule and its run history (jobs it created stay in the queue; its change log stays).
    Drop {
        /// Schedule name.
        name: String,
        #[command(flatten)]
        why: Reason,
    },
    /// Every schedule: state, spec, next run, failures.
    List {
        #[command(flatten)]
        format: Format,
    },
    /// One schedule: its definition, state, counters, last error and latest runs.
    Show {
        /// Schedule name.
        name: String,
        /// Runs to show.
        #[arg(long, short = 'n', default_value_t = SHOW_RUNS)]
        runs: u32,
        #[command(flatten)]
        format: Format,
    },
    /// A schedule's run history: planned time, job, start, finish, outcome.
    Runs {
        /// Schedule name.
        name: String,
        /// At most this many, newest first.
        #[arg(long, short = 'n', default_value_t = RUNS_LIMIT)]
        limit: u32,
        #[command(flatten)]
        format: Format,
    },
    /// Stop creating runs until `resume` (running jobs go on; see `abort`).
    Pause {
        /// Schedule name.
        name: String,
        #[command(flatten)]
        why: Reason,
    },
    /// Resume a paused or broken schedule from its next planned time after now (missed times are not made
    /// up); a broken schedule's failure count starts again at 0.
    Resume {
        /// Schedule name.
        name: String,
        #[command(flatten)]
        why: Reason,
    },
    /// Create a run now, whatever the schedule's times, state and overlap policy. Prints the job id.
    RunNow {
        /// Schedule name.
        name: String,
        #[command(flatten)]
        why: Reason,
    },
    /// Who changed a schedule, how and why: create, update, pause, resume, run-now, abort, drop, and the
    /// scheduler's own changes (broken after failures, paused by on_error). Also for a dropped schedule.
    Log {
        /// Schedule name.
        name: String,
        /// At most this many, newest first.
        #[arg(long, short = 'n', default_value_t = LOG_LIMIT)]
        limit: u32,
        #[command(flatten)]
        format: Format,
    },
    /// Print the next planned times of a schedule, or of a spec given with --spec (nothing is stored).
    #[command(after_help = SPEC_HELP)]
    Next(ScheduleNextArgs),
    /// Cancel the schedule's jobs that are queued, waiting for a retry, or running (running ones are told
    /// to stop and end `cancelled`).
    Abort {
        /// Schedule name.
        name: String,
        /// Also pause the schedule, so no new run starts.
        #[arg(long)]
        pause: bool,
        #[command(flatten)]
        why: Reason,
    },
}

impl ScheduleCommand {
    /// The `--reason` of a command that changes a schedule.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Create(a) => a.why.reason.as_deref(),
            Self::Update(a) => a.why.reason.as_deref(),
            Self::Drop { why, .. }
            | Self::Pause { why, .. }
            | Self::Resume { why, .. }
            | Self::RunNow { why, .. }
            | Self::Abort { why, .. } => why.reason.as_deref(),
            Self::List { .. }
            | Self::Show { .. }
            | Self::Runs { .. }
            | Self::Next(_)
            | Self::Log { .. } => None,
        }
    }
}

/// `--reason`, on every command that changes a schedule.
#[derive(Debug, Args)]
pub struct Reason {
    /// Why: kept in the schedule's change log (`jobq schedule log NAME`) with who did it.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

/// The help of a schedule's [`JobOptions`]: about each job it makes.
#[derive(Debug)]
pub struct EachJob;

impl JobHelp for EachJob {
    const PAYLOAD: &'static str = "JSON payload of each job. Default {}";
    const QUEUE: &'static str = "Queue of each job. Default \"default\"";
    const PRIORITY: &'static str = "Priority of each job: smaller runs first. Default 0";
    const MAX_ATTEMPTS: &'static str = "Attempts per job. Default 3 with --on-error retry, else 1";
    const TIMEOUT: &'static str = "Run-time limit of each job (e.g. 10m)";
}

/// Options shared by `create` and `update`; on `update` only those given change.
#[derive(Debug, Args)]
pub struct ScheduleOptions {
    /// IANA time zone of wall-clock specs, e.g. Europe/Paris. Default UTC.
    #[arg(long = "tz")]
    pub time_zone: Option<String>,
    #[command(flatten)]
    pub job: JobOptions<EachJob, NoDue>,
    /// No run before this time (RFC 3339, e.g. 2030-01-01T00:00:00Z). `none` clears it on update.
    #[arg(long)]
    pub start: Option<String>,
    /// No run after this time; the schedule is finished then. `none` clears it on update.
    #[arg(long)]
    pub end: Option<String>,
    /// Also run once each time a `jobq scheduler --forever` (or an in-process scheduler) starts.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub at_startup: Option<bool>,
    /// When a run is due while the previous one has not ended: wait (default), skip, allow.
    #[arg(long, value_parser = clap::value_parser!(Overlap))]
    pub overlap: Option<Overlap>,
    /// When a run fails: retry (default; backoff, 3 attempts), keep (next planned time), pause.
    #[arg(long, value_parser = clap::value_parser!(OnError))]
    pub on_error: Option<OnError>,
    /// Planned times missed while no scheduler ran: once (default; one run), all (each, at most 100), skip.
    #[arg(long, value_parser = clap::value_parser!(Misfire))]
    pub misfire: Option<Misfire>,
    /// Delay each job by a random time up to this (e.g. 30s). Default 0.
    #[arg(long, value_parser = parse_duration)]
    pub jitter: Option<Duration>,
    /// Consecutive failed runs after which the schedule is broken (0: never). Default 16.
    #[arg(long)]
    pub broken_after: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ScheduleCreateArgs {
    /// Unique name (letters, digits and _ - . : /).
    pub name: String,
    /// Job kind: picks the handler.
    #[arg(long, short = 'k')]
    pub kind: String,
    /// When to run (see below).
    #[arg(long, short = 's')]
    pub spec: String,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    #[command(flatten)]
    pub options: ScheduleOptions,
    #[command(flatten)]
    pub why: Reason,
}

#[derive(Debug, Args)]
pub struct ScheduleUpdateArgs {
    /// Schedule name.
    pub name: String,
    /// New job kind.
    #[arg(long, short = 'k')]
    pub kind: Option<String>,
    /// New spec.
    #[arg(long, short = 's')]
    pub spec: Option<String>,
    #[command(flatten)]
    pub options: ScheduleOptions,
    #[command(flatten)]
    pub why: Reason,
}

#[derive(Debug, Args)]
pub struct ScheduleNextArgs {
    /// Schedule name (or give --spec instead).
    #[arg(required_unless_present = "spec", conflicts_with = "spec")]
    pub name: Option<String>,
    /// A spec to check without storing it.
    #[arg(long, short = 's')]
    pub spec: Option<String>,
    /// Time zone for --spec. Default UTC.
    #[arg(long = "tz", requires = "spec")]
    pub time_zone: Option<String>,
    /// How many times to print.
    #[arg(long, short = 'n', default_value_t = NEXT_COUNT)]
    pub count: usize,
    #[command(flatten)]
    pub format: Format,
}
