//! Command-line arguments. Flags override the config file, which overrides the built-in defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use jobq::WorkerConfig;
use jobq::config::{HumanDuration, ReaperSection, WorkerSection};
use jobq::{ReaperConfig, SupervisorConfig};

mod bench;
mod jobs;
pub mod limit;
pub mod queue;
pub mod scale;
mod schedule;

pub use bench::BenchArgs;
pub use jobs::{BulkArgs, EnqueueArgs, JobsCommand};
pub use schedule::{
    ScheduleCommand, ScheduleCreateArgs, ScheduleNextArgs, ScheduleOptions, ScheduleUpdateArgs,
    SchedulerArgs,
};

/// A duration as the help texts and the config file spell it (`2s`, `30m`, `7days`).
pub(crate) fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

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
    Queue(queue::QueueCommand),
    /// Cap how many jobs of a kind or queue run at once across every worker; list the caps.
    #[command(subcommand)]
    Limit(limit::LimitCommand),
    /// Delete done, dead and cancelled jobs older than the retention.
    Prune(PruneArgs),
    /// Make the jobs of dead workers runnable again; clean the process registry; prune old jobs.
    Reaper(ReaperArgs),
    /// Keep N worker processes alive: restart those that die and release their jobs at once.
    /// SIGTERM/SIGINT drains them; SIGHUP rolls them (they re-read the config).
    Supervise(SuperviseArgs),
    /// Change how many workers running supervisors keep (all hosts, or one), within seconds; show the
    /// stored counts.
    Scale(scale::ScaleArgs),
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

/// Where the dashboard listens unless told: the loopback interface, where it needs no credentials.
const DEFAULT_WEB_BIND: &str = "127.0.0.1:8080";
/// The basic-auth user name unless told.
const DEFAULT_WEB_USER: &str = "jobq";

#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to listen on (port 0 picks a free one and logs it).
    #[arg(long, default_value = DEFAULT_WEB_BIND, value_name = "HOST:PORT")]
    pub bind: std::net::SocketAddr,

    /// Also answer requests whose Host header is NAME (repeatable): the DNS names users type, and
    /// the Host a reverse proxy forwards. NAME:PORT answers that port only. Otherwise only the
    /// IP address a client connected to is answered, and `localhost` when bound to loopback or to
    /// 0.0.0.0/:: (so on 0.0.0.0, http://10.0.0.5:8080/ works, http://jobs.example.com:8080/ needs
    /// --public-host jobs.example.com); any other Host gets 421, which stops DNS-rebinding pages.
    #[arg(long = "public-host", value_name = "NAME", value_parser = parse_public_host)]
    pub public_hosts: Vec<String>,

    /// Serve under this path, for a reverse proxy that forwards e.g. /jobq/… unchanged.
    #[arg(long, default_value = "", value_name = "PATH", value_parser = parse_prefix)]
    pub prefix: String,

    /// Show everything, change nothing: no action buttons, every POST refused.
    #[arg(long)]
    pub read_only: bool,

    /// Basic-auth user name; its password comes from JOBQ_WEB_PASSWORD or --password-file.
    #[arg(long, env = "JOBQ_WEB_USER", default_value = DEFAULT_WEB_USER)]
    pub user: String,

    /// A file whose first line is the basic-auth password (instead of JOBQ_WEB_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<std::path::PathBuf>,

    /// A file whose first line is a bearer token for scripts (instead of JOBQ_WEB_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,

    #[arg(long, value_name = "DURATION", value_parser = parse_interval, help = format!(
        "How long a client has to send a request's headers (and an idle connection to send its next \
         request) before the connection is closed. Default {}",
        human(jobq::web::ServeConfig::DEFAULT_HEADER_TIMEOUT)
    ))]
    pub header_timeout: Option<Duration>,

    #[arg(long, value_name = "DURATION", value_parser = parse_interval, help = format!(
        "How long a request's body may take to arrive after its headers; then 408. Default {}",
        human(jobq::web::WebConfig::DEFAULT_BODY_TIMEOUT)
    ))]
    pub body_timeout: Option<Duration>,

    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help = format!(
        "Most connections open at once; more wait, in arrival order, until one closes. Default {}",
        jobq::web::ServeConfig::DEFAULT_MAX_CONNECTIONS
    ))]
    pub max_connections: Option<u32>,

    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// `--public-host`: checked as the dashboard will read it.
fn parse_public_host(s: &str) -> Result<String, String> {
    jobq::web::AllowedHosts::any()
        .with(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// `--prefix`: checked before anything is started.
fn parse_prefix(s: &str) -> Result<String, String> {
    jobq::web::check_prefix(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Create the URL's database first if it does not exist.
    #[arg(long)]
    pub create_database: bool,
}

#[derive(Debug, Args)]
pub struct BenchWorkerArgs {
    /// Jobs run at once.
    #[arg(long)]
    pub concurrency: u32,
    /// Most rows per claim.
    #[arg(long)]
    pub batch_size: u32,
    /// The kind the no-op handler serves.
    #[arg(long)]
    pub kind: String,
}

#[derive(Debug, Args)]
pub struct EnableArgs {
    /// The [databases.NAME] section of the config file.
    #[arg(value_name = "DATABASE")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct DisableArgs {
    /// The [databases.NAME] section of the config file.
    #[arg(value_name = "DATABASE")]
    pub name: String,

    /// Remove the schema even while jobq processes live or jobs are unfinished there (they are lost).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub opts: WorkerOptions,

    /// Keep polling instead of exiting once nothing is due.
    #[arg(long)]
    pub forever: bool,

    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// Worker settings shared by `worker` and `supervise`.
#[derive(Debug, Args, Clone)]
pub struct WorkerOptions {
    /// Queues to claim from, in order (comma-separated). Default: worker.queues from the config, else "default".
    #[arg(long = "queue", short = 'Q', value_delimiter = ',')]
    pub queues: Vec<String>,

    // The defaults in the help texts come from the library's constants, so `--help` cannot drift.
    #[arg(long, short = 'c', value_parser = parse_concurrency, help = format!(
        "Jobs run at once in one worker process (at most {}). Default {}",
        WorkerConfig::MAX_CONCURRENCY, WorkerConfig::DEFAULT_CONCURRENCY))]
    pub concurrency: Option<u32>,

    #[arg(long, short = 'b', value_parser = clap::value_parser!(u32).range(1..), help = format!(
        "Most jobs taken by one claim (never more than free slots). Default {}",
        WorkerConfig::DEFAULT_BATCH_SIZE))]
    pub batch_size: Option<u32>,

    #[arg(long, value_parser = parse_interval, help = format!(
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

impl WorkerOptions {
    /// The flags that give these options again: what a supervisor passes its `jobq worker` children.
    /// Written beside the flags themselves, and read back through the parser by a test, so that a flag
    /// the children would not understand fails that test.
    pub fn to_flags(&self) -> Vec<String> {
        let mut a = Vec::new();
        if !self.queues.is_empty() {
            a.push(format!("--queue={}", self.queues.join(",")));
        }
        if let Some(c) = self.concurrency {
            a.push(format!("--concurrency={c}"));
        }
        if let Some(b) = self.batch_size {
            a.push(format!("--batch-size={b}"));
        }
        if let Some(p) = self.poll_interval {
            a.push(format!("--poll-interval={}", human(p)));
        }
        if let Some(g) = self.shutdown_grace {
            a.push(format!("--shutdown-grace={}", human(g)));
        }
        if let Some(t) = self.default_timeout {
            a.push(format!("--default-timeout={}", human(t)));
        }
        a
    }

    /// Lays the flags given over the config file's `[worker]` section: a flag wins over its key.
    pub fn overlay(&self, file: &mut WorkerSection) {
        if !self.queues.is_empty() {
            file.queues = Some(self.queues.clone());
        }
        set(&mut file.concurrency, self.concurrency);
        set(&mut file.batch_size, self.batch_size);
        set(
            &mut file.poll_interval,
            self.poll_interval.map(HumanDuration),
        );
        set(
            &mut file.shutdown_grace,
            self.shutdown_grace.map(HumanDuration),
        );
        set(
            &mut file.default_timeout,
            self.default_timeout.map(HumanDuration),
        );
    }
}

/// `*key = flag` when the flag was given.
pub(crate) fn set<T>(key: &mut Option<T>, flag: Option<T>) {
    if flag.is_some() {
        *key = flag;
    }
}

/// Most worker processes one supervisor keeps (`-n`): 1,000. Each worker holds an anchor connection
/// and a pool of its own (MariaDB allows 151 connections by default), and the supervisor sizes its
/// table of children by `-n` up front, so an absurd count must be refused, not attempted. More jobs at
/// once come from `--concurrency`, more processes from more nodes.
const MAX_WORKERS: u32 = 1_000;

#[derive(Debug, Args, Clone)]
pub struct SuperviseArgs {
    #[arg(short = 'n', long = "workers",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WORKERS)), help = format!(
        "Worker processes to keep alive (at most {MAX_WORKERS}; for more jobs at once raise --concurrency). \
         Default: `workers` from the config (per database with [databases.NAME] sections), else {}",
        SupervisorConfig::DEFAULT_WORKERS))]
    pub workers: Option<u32>,

    /// Also run a reaper in the supervisor's process, so one command runs a whole node.
    #[arg(long)]
    pub reaper: bool,

    /// Also run a scheduler in the supervisor's process (any number of schedulers may run at once).
    #[arg(long)]
    pub scheduler: bool,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    #[command(flatten)]
    pub opts: WorkerOptions,
}

/// Where a long-running command serves its metrics.
#[derive(Debug, Args, Clone, Copy)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics on /metrics, and /healthz and /readyz, at this address (e.g.
    /// 127.0.0.1:9187; port 0 picks a free one and logs it).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// How a command that reports prints it.
#[derive(Debug, Args, Clone, Copy)]
pub struct Format {
    /// Print JSON instead of text (field names: the README's "JSON output").
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub format: Format,
    /// Count the jobs that have waited for other jobs longer than this (default: the config's
    /// `[reaper] long_wait`, else 1h).
    #[arg(long, value_parser = parse_duration)]
    pub long_wait: Option<std::time::Duration>,
}

#[derive(Debug, Args)]
pub struct ReaperArgs {
    /// One pass, then exit (for cron). Without it the reaper runs until SIGTERM/SIGINT.
    #[arg(long, conflicts_with = "forever")]
    pub once: bool,

    /// Run until SIGTERM/SIGINT (the default).
    #[arg(long)]
    pub forever: bool,

    #[arg(long, value_parser = parse_interval, help = format!(
        "Time between passes. Default: reaper.interval from the config, else {}",
        human(ReaperConfig::DEFAULT_INTERVAL)))]
    pub interval: Option<Duration>,

    #[arg(long, value_parser = parse_interval, help = format!(
        "A claimant whose heartbeat is older than this is gone (at least three worker heartbeats). \
         Default: reaper.lease, else {}", human(ReaperConfig::DEFAULT_LEASE)))]
    pub lease: Option<Duration>,

    /// Trust only heartbeats, not database sessions (for connections through a multiplexing proxy).
    #[arg(long)]
    pub no_session_signals: bool,

    #[command(flatten)]
    pub metrics: MetricsArgs,
}

impl ReaperArgs {
    /// Lays the flags given over the config file's `[reaper]` section.
    pub fn overlay(&self, file: &mut ReaperSection) {
        set(&mut file.interval, self.interval.map(HumanDuration));
        set(&mut file.lease, self.lease.map(HumanDuration));
        if self.no_session_signals {
            file.session_signals = Some(false);
        }
    }
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    #[arg(long, value_parser = parse_duration, help = format!(
        "Keep jobs that finished less than this long ago. Default: prune.retention from the config, \
         else {}", human(ReaperConfig::DEFAULT_RETENTION)))]
    pub retention: Option<Duration>,
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 30s, 5m, 2h, 7d)"))
}

/// A period: a duration above zero (a zero interval is a busy loop at best, and tokio's timer panics
/// on it).
pub(crate) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be above zero".into());
    }
    Ok(d)
}

/// A worker's concurrency: 1..=[`WorkerConfig::MAX_CONCURRENCY`].
fn parse_concurrency(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    let max = WorkerConfig::MAX_CONCURRENCY;
    match n {
        0 => Err("must be at least 1".into()),
        n if n > max => Err(format!(
            "above the maximum of {max} jobs per worker process; run more worker processes instead"
        )),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn worker_flags_read_back_as_the_same_options() {
        // Every field set: a new option must be added here, and to `to_flags`, to compile and pass.
        let opts = WorkerOptions {
            queues: vec!["mail".into(), "default".into()],
            concurrency: Some(7),
            batch_size: Some(3),
            poll_interval: Some(Duration::from_millis(1500)),
            shutdown_grace: Some(Duration::from_secs(90)),
            default_timeout: Some(Duration::from_secs(3 * 3600 + 1)),
        };
        let argv = ["jobq", "worker"]
            .into_iter()
            .map(String::from)
            .chain(opts.to_flags());
        let Command::Worker(w) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not the worker command");
        };
        assert_eq!(format!("{:?}", w.opts), format!("{opts:?}"));
        assert_eq!(
            WorkerOptions {
                queues: Vec::new(),
                ..opts
            }
            .to_flags()
            .len(),
            5
        );
    }
}
