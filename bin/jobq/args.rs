//! Command-line arguments: the top-level [`Cli`] and its [`Command`]s. Each command's own arguments are
//! declared beside the command, in `cmd/`, and the options several commands share in `options.rs`.
//! Flags override the config file, which overrides the built-in defaults.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::cmd::bench::{BenchArgs, BenchWorkerArgs};
use crate::cmd::enable::{DisableArgs, EnableArgs};
use crate::cmd::enqueue::EnqueueArgs;
use crate::cmd::jobs::JobsCommand;
use crate::cmd::limit::LimitCommand;
use crate::cmd::migrate::MigrateArgs;
use crate::cmd::prune::PruneArgs;
use crate::cmd::queue::QueueCommand;
use crate::cmd::reaper::ReaperArgs;
use crate::cmd::scale::ScaleArgs;
use crate::cmd::schedule::ScheduleCommand;
use crate::cmd::scheduler::SchedulerArgs;
use crate::cmd::stats::StatsArgs;
use crate::cmd::supervise::SuperviseArgs;
use crate::cmd::web::WebArgs;
use crate::cmd::worker::WorkerArgs;

#[derive(Debug, Parser)]
#[command(
    name = "jobq",
    version,
    about = "A job queue and scheduler inside your MySQL/MariaDB database",
    long_about = "A job queue and scheduler inside your MySQL/MariaDB database.\n\n\
        Applications enqueue with plain SQL (INSERT INTO job_queue (kind, payload) VALUES ('resize', '{\"id\":7}')); \
        `jobq worker` claims due jobs and runs them with the handlers configured in jobq.toml.",
    after_help = "Database: --database-url, else $JOBQ_DATABASE_URL, else $DATABASE_URL, else `database_url` in the \
        config file; a command that needs a database and finds none named says so. With --database NAME, the database_url of the config's \
        [databases.NAME] section, and nothing else.\n\
        TLS: $JOBQ_DATABASE_SSL_MODE, else `database_ssl_mode`, else the URL's ?ssl-mode=, else preferred \
        (use verify_identity with a CA file, $JOBQ_DATABASE_SSL_CA or `database_ssl_ca`, in production).\n\
        Config: --config, else $JOBQ_CONFIG, else ./jobq.toml if it exists.\n\
        Logs go to stderr; set the level with -v/-q or $JOBQ_LOG (e.g. JOBQ_LOG=jobq=debug), the format with \
        --log-format json. Reporting commands print JSON with --json."
)]
pub struct Cli {
    /// Database URL: mysql://user:password@host:port/database.
    #[arg(long, global = true, env = "JOBQ_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Config file (TOML).
    #[arg(long, global = true, env = "JOBQ_CONFIG")]
    pub config: Option<PathBuf>,

    /// Work on the database of the config's [databases.NAME] section (its URL, handlers and settings).
    #[arg(long, global = true, env = "JOBQ_DATABASE", value_name = "NAME")]
    pub database: Option<String>,

    /// More log output (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only warnings and errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Log lines as text (for people) or JSON (one object per line, for log shippers).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "JOBQ_LOG_FORMAT")]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-05-01T12:00:00Z  INFO worker started claim=… queues=…`.
    Text,
    /// `{"timestamp":…,"level":"INFO","message":"worker started","claim":…}`.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade jobq's tables (safe to run any number of times).
    Migrate(MigrateArgs),
    /// Install jobq in the database of a [databases.NAME] config section: create the database if it is
    /// missing, then migrate it. `jobq supervise` serves it from then on.
    Enable(EnableArgs),
    /// Remove jobq's tables, views and procedure (and every job in them) from the database of a
    /// [databases.NAME] section. Refused while workers live or jobs are unfinished there, unless --force.
    Disable(DisableArgs),
    /// Claim and run due jobs. By default drains the queue and exits 0 (for cron); --forever keeps polling.
    Worker(WorkerArgs),
    /// Insert a job.
    Enqueue(EnqueueArgs),
    /// Jobs per queue and state, the oldest due job, and live jobq processes.
    Stats(StatsArgs),
    /// List, inspect, retry and cancel jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Pause and resume queues for every worker on every host; list the paused ones.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Cap how many jobs of a kind or queue run at once across every worker; list the caps.
    #[command(subcommand)]
    Limit(LimitCommand),
    /// Delete done, dead and cancelled jobs older than the retention.
    Prune(PruneArgs),
    /// Make the jobs of dead workers runnable again; clean the process registry; prune old jobs.
    Reaper(ReaperArgs),
    /// Keep N worker processes alive: restart those that die and release their jobs at once.
    /// SIGTERM/SIGINT drains them; SIGHUP rolls them (they re-read the config).
    Supervise(SuperviseArgs),
    /// Change how many workers running supervisors keep (all hosts, or one), within seconds; show the
    /// stored counts.
    Scale(ScaleArgs),
    /// Define, inspect and control schedules: cron expressions, intervals, calendar specs, one-off times.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Turn due schedules into jobs. By default one pass, then exit (for cron); --forever keeps ticking.
    /// Any number may run at once: each planned time still gets exactly one job.
    Scheduler(SchedulerArgs),
    /// Measure jobq on this server (in a scratch database it creates and drops): raw-SQL limit, drain
    /// throughput, steady-state latency, big table, idle cost, memory, enqueue. Prints one table.
    Bench(BenchArgs),
    /// One worker process of `jobq bench`'s drain: a library worker with a no-op handler, draining.
    #[command(name = crate::bench::WORKER_SUBCOMMAND, hide = true)]
    BenchWorker(BenchWorkerArgs),
    /// Serve the dashboard: queues, jobs, schedules, processes and the audit trail in a browser, with a
    /// JSON API under /api. Listens on the loopback interface by default; beyond it it needs
    /// credentials (JOBQ_WEB_PASSWORD or --password-file, JOBQ_WEB_TOKEN or --token-file).
    Web(WebArgs),
}
