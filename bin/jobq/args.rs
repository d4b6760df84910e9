//! Command-line arguments. Flags override the config file, which overrides the built-in defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

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

    /// Jobs run at once in one worker process. Default 10.
    #[arg(long, short = 'c')]
    pub concurrency: Option<u32>,

    /// Most jobs taken by one claim (never more than free slots). Default 10.
    #[arg(long, short = 'b')]
    pub batch_size: Option<u32>,

    /// Longest wait between polls while idle (e.g. 500ms, 2s). Default 1s.
    #[arg(long, value_parser = parse_duration)]
    pub poll_interval: Option<Duration>,

    /// Time running jobs get to finish after SIGTERM/SIGINT. Default 30s.
    #[arg(long, value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,

    /// Run-time limit for jobs that set none and whose handler sets none. Default 30m.
    #[arg(long, value_parser = parse_duration)]
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
    /// Run a done, dead, cancelled or waiting job again now.
    Retry {
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

    /// Time between passes. Default: reaper.interval from the config, else 2s.
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,

    /// A claimant whose heartbeat is older than this is gone. Default: reaper.lease, else 60s.
    #[arg(long, value_parser = parse_duration)]
    pub lease: Option<Duration>,

    /// Trust only heartbeats, not database sessions (for connections through a multiplexing proxy).
    #[arg(long)]
    pub no_session_signals: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Keep jobs that finished less than this long ago. Default: prune.retention from the config, else 7d.
    #[arg(long, value_parser = parse_duration)]
    pub retention: Option<Duration>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 30s, 5m, 2h, 7d)"))
}
