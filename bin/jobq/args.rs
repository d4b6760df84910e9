//! Command-line arguments. Flags override the config file, which overrides the built-in defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use jobq::WorkerConfig;
use jobq::reaper::ReaperConfig;

/// A duration as the help texts and the config file spell it (`2s`, `30m`, `7days`).
fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The database jobq uses when nothing else names one.
pub const DEFAULT_DATABASE_URL: &str = "mysql://root@127.0.0.1:3306/test";

#[derive(Debug, Parser)]
#[command(
    name = "jobq",
    version,
    about = "A job queue and scheduler inside your MySQL/MariaDB database",
    long_about = "A job queue and scheduler inside your MySQL/MariaDB database.\n\n\
        Applications enqueue with plain SQL (INSERT INTO job_queue (kind, payload) VALUES ('resize', '{\"id\":7}')); \
        `jobq worker` claims due jobs and runs them with the handlers configured in jobq.toml.",
    after_help = "Database: --database-url, else $JOBQ_DATABASE_URL, else $DATABASE_URL, else `database_url` in the \
        config file, else mysql://root@127.0.0.1:3306/test.\n\
        TLS: $JOBQ_DATABASE_SSL_MODE, else `database_ssl_mode`, else the URL's ?ssl-mode=, else preferred \
        (use verify_identity with a CA file, $JOBQ_DATABASE_SSL_CA or `database_ssl_ca`, in production).\n\
        Config: --config, else $JOBQ_CONFIG, else ./jobq.toml if it exists.\n\
        Logs go to stderr; set the level with -v/-q or $JOBQ_LOG (e.g. JOBQ_LOG=jobq=debug)."
)]
pub struct Cli {
    /// Database URL: mysql://user:password@host:port/database.
    #[arg(long, global = true, env = "JOBQ_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Config file (TOML).
    #[arg(long, global = true, env = "JOBQ_CONFIG")]
    pub config: Option<PathBuf>,

    /// More log output (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only warnings and errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade jobq's tables (safe to run any number of times).
    Migrate(MigrateArgs),
    /// Claim and run due jobs. By default drains the queue and exits 0 (for cron); --forever keeps polling.
    Worker(WorkerArgs),
    /// Insert a job.
    Enqueue(EnqueueArgs),
    /// Jobs per queue and state, the oldest due job, and live jobq processes.
    Stats,
    /// List, inspect, retry and cancel jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Delete done, dead and cancelled jobs older than the retention.
    Prune(PruneArgs),
    /// Make the jobs of dead workers runnable again; clean the process registry; prune old jobs.
    Reaper(ReaperArgs),
    /// Keep N worker processes alive: restart those that die and release their jobs at once.
    /// SIGTERM/SIGINT drains them; SIGHUP rolls them (they re-read the config).
    Supervise(SuperviseArgs),
    /// Define, inspect and control schedules: cron expressions, intervals, calendar specs, one-off times.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Turn due schedules into jobs. By default one pass, then exit (for cron); --forever keeps ticking.
    /// Any number may run at once: each planned time still gets exactly one job.
    Scheduler(SchedulerArgs),
    /// Measure jobq on this server (in a scratch database it creates and drops): raw-SQL limit, drain
    /// throughput, steady-state latency, big table, idle cost, memory, enqueue. Prints one table.
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Jobs drained by the library drain (default 100000; 2000 with --quick).
    #[arg(long)]
    pub jobs: Option<u64>,

    /// The CI-sized run: tiny sizes and a reduced grid, to prove the bench works. Figures mean little.
    #[arg(long)]
    pub quick: bool,

    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Sections to run (comma-separated): raw,drain,steady,big,idle,footprint,enqueue. Default all.
    #[arg(long, value_delimiter = ',')]
    pub sections: Vec<String>,

    /// Finished rows kept in the table by the big-table section (default 1000000).
    #[arg(long)]
    pub big_rows: Option<u64>,

    /// Jobs per raw-SQL cell (default 10000; a quarter at 1 row per claim, twice from 100 rows).
    #[arg(long)]
    pub raw_jobs: Option<u64>,

    /// Drain settings to sweep instead of the built-in list, as WORKERS:CONCURRENCY:BATCH
    /// (comma-separated), e.g. `--sweep 1:10:10,2:1000:500`.
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<String>,

    /// Connections swept by the raw grid (comma-separated; default 1,2,4,8).
    #[arg(long, value_delimiter = ',')]
    pub raw_workers: Vec<u32>,

    /// Rows per claim swept by the raw grid (comma-separated; default 1,10,100,500,1000).
    #[arg(long, value_delimiter = ',')]
    pub raw_batches: Vec<u32>,

    /// Measure pickup latency at these rates (jobs/s, comma-separated) instead of searching for the
    /// sustainable rate.
    #[arg(long, value_delimiter = ',')]
    pub steady_rates: Vec<f64>,

    /// Worker settings (WORKERS:CONCURRENCY:BATCH) for the steady and big-table sections, instead of
    /// the drain's winner.
    #[arg(long)]
    pub settings: Option<String>,

    /// Keep the scratch database at the end (its name is printed).
    #[arg(long)]
    pub keep_db: bool,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Create the URL's database first if it does not exist.
    #[arg(long)]
    pub create_database: bool,
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub opts: WorkerOptions,

    /// Keep polling instead of exiting once nothing is due.
    #[arg(long)]
    pub forever: bool,
}

/// Worker settings shared by `worker` and `supervise`.
#[derive(Debug, Args, Clone)]
pub struct WorkerOptions {
    /// Queues to claim from, in order (comma-separated). Default: worker.queues from the config, else "default".
    #[arg(long = "queue", short = 'Q', value_delimiter = ',')]
    pub queues: Vec<String>,

    // The defaults in the help texts come from the library's constants, so `--help` cannot drift.
    #[arg(long, short = 'c', help = format!(
        "Jobs run at once in one worker process. Default {}", WorkerConfig::DEFAULT_CONCURRENCY))]
    pub concurrency: Option<u32>,

    #[arg(long, short = 'b', help = format!(
        "Most jobs taken by one claim (never more than free slots). Default {}",
        WorkerConfig::DEFAULT_BATCH_SIZE))]
    pub batch_size: Option<u32>,

    #[arg(long, value_parser = parse_duration, help = format!(
        "Longest idle wait (one server-side wait, probing for due jobs, per interval). Default {}",
        human(WorkerConfig::DEFAULT_POLL_INTERVAL)))]
    pub poll_interval: Option<Duration>,

    #[arg(long, value_parser = parse_duration, help = format!(
        "Time running jobs get to finish after SIGTERM/SIGINT. Default {}",
        human(WorkerConfig::DEFAULT_SHUTDOWN_GRACE)))]
    pub shutdown_grace: Option<Duration>,

    #[arg(long, value_parser = parse_duration, help = format!(
        "Run-time limit for jobs that set none and whose handler sets none. Default {}",
        human(WorkerConfig::DEFAULT_TIMEOUT)))]
    pub default_timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct SuperviseArgs {
    /// Worker processes to keep alive.
    #[arg(short = 'n', long = "workers", default_value_t = 2)]
    pub workers: u32,

    /// Also run a reaper in the supervisor's process, so one command runs a whole node.
    #[arg(long)]
    pub reaper: bool,

    /// Also run a scheduler in the supervisor's process (any number of schedulers may run at once).
    #[arg(long)]
    pub scheduler: bool,

    #[command(flatten)]
    pub opts: WorkerOptions,
}

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
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Newest jobs first.
    List(ListArgs),
    /// Every column of one job.
    Show {
        /// Job id.
        id: u64,
    },
    /// Run a done, dead, cancelled or waiting job again now, with a fresh attempt budget (attempts start
    /// again at 0; the attempts used so far are noted in last_error).
    Retry {
        /// Job id.
        id: u64,
    },
    /// Make a queued job, or one waiting for its retry, due now (its attempts are unchanged).
    RunNow {
        /// Job id.
        id: u64,
    },
    /// Cancel a job: at once if it has not started; a running job's worker is asked to stop it.
    Cancel {
        /// Job id.
        id: u64,
    },
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this state: queued, running, done, retry, dead, cancelled.
    #[arg(long, short = 's')]
    pub state: Option<String>,
    /// Only this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only this kind.
    #[arg(long, short = 'k')]
    pub kind: Option<String>,
    /// At most this many.
    #[arg(long, short = 'n', default_value_t = 20)]
    pub limit: u32,
}

#[derive(Debug, Args)]
pub struct ReaperArgs {
    /// One pass, then exit (for cron). Without it the reaper runs until SIGTERM/SIGINT.
    #[arg(long, conflicts_with = "forever")]
    pub once: bool,

    /// Run until SIGTERM/SIGINT (the default).
    #[arg(long)]
    pub forever: bool,

    #[arg(long, value_parser = parse_duration, help = format!(
        "Time between passes. Default: reaper.interval from the config, else {}",
        human(ReaperConfig::DEFAULT_INTERVAL)))]
    pub interval: Option<Duration>,

    #[arg(long, value_parser = parse_duration, help = format!(
        "A claimant whose heartbeat is older than this is gone (at least three worker heartbeats). \
         Default: reaper.lease, else {}", human(ReaperConfig::DEFAULT_LEASE)))]
    pub lease: Option<Duration>,

    /// Trust only heartbeats, not database sessions (for connections through a multiplexing proxy).
    #[arg(long)]
    pub no_session_signals: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    #[arg(long, value_parser = parse_duration, help = format!(
        "Keep jobs that finished less than this long ago. Default: prune.retention from the config, \
         else {}", human(jobq::config::DEFAULT_RETENTION)))]
    pub retention: Option<Duration>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 30s, 5m, 2h, 7d)"))
}

// ---------------------------------------------------------------------------------------------------
// jobq schedule, jobq scheduler
// ---------------------------------------------------------------------------------------------------

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
    /// Delete a schedule and its run history (jobs it created stay in the queue).
    Drop {
        /// Schedule name.
        name: String,
    },
    /// Every schedule: state, spec, next run, failures.
    List,
    /// One schedule: its definition, state, counters, last error and latest runs.
    Show {
        /// Schedule name.
        name: String,
        /// Runs to show.
        #[arg(long, short = 'n', default_value_t = 10)]
        runs: u32,
    },
    /// A schedule's run history: planned time, job, start, finish, outcome.
    Runs {
        /// Schedule name.
        name: String,
        /// At most this many, newest first.
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: u32,
    },
    /// Stop creating runs until `resume` (running jobs go on; see `abort`).
    Pause {
        /// Schedule name.
        name: String,
    },
    /// Resume a paused or broken schedule from its next planned time after now (missed times are not made
    /// up); a broken schedule's failure count starts again at 0.
    Resume {
        /// Schedule name.
        name: String,
    },
    /// Create a run now, whatever the schedule's times, state and overlap policy. Prints the job id.
    RunNow {
        /// Schedule name.
        name: String,
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
    },
}

/// Options shared by `create` and `update`; on `update` only those given change.
#[derive(Debug, Args)]
pub struct ScheduleOptions {
    /// IANA time zone of wall-clock specs, e.g. Europe/Paris. Default UTC.
    #[arg(long = "tz")]
    pub time_zone: Option<String>,
    /// JSON payload of each job. Default {}.
    #[arg(long, short = 'p')]
    pub payload: Option<String>,
    /// Queue of each job. Default "default".
    #[arg(long)]
    pub queue: Option<String>,
    /// Priority of each job: smaller runs first. Default 0.
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i16>,
    /// Attempts per job. Default 3 with --on-error retry, else 1.
    #[arg(long)]
    pub max_attempts: Option<u16>,
    /// Run-time limit of each job (e.g. 10m).
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
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
    #[arg(long)]
    pub overlap: Option<String>,
    /// When a run fails: retry (default; backoff, 3 attempts), keep (next planned time), pause.
    #[arg(long)]
    pub on_error: Option<String>,
    /// Planned times missed while no scheduler ran: once (default; one run), all (each, at most 100), skip.
    #[arg(long)]
    pub misfire: Option<String>,
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
    #[arg(long, short = 'n', default_value_t = 5)]
    pub count: usize,
}

#[derive(Debug, Args)]
pub struct SchedulerArgs {
    /// Keep ticking until SIGTERM/SIGINT (registers in the process registry, creates startup runs).
    #[arg(long, conflicts_with = "once")]
    pub forever: bool,
    /// One pass, then exit (the default; for a crontab line). Startup runs are not made in this mode.
    #[arg(long)]
    pub once: bool,
    /// Time between ticks with --forever. Default 1s.
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// Most jobs one tick creates. Default 100.
    #[arg(long)]
    pub max_jobs_per_tick: Option<u32>,
}
