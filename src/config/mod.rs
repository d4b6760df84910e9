//! The configuration file, `jobq.toml`.
//!
//! Every key is optional. Unknown keys are errors (a misspelt `concurency` must not silently leave the
//! default in place), and the whole file is validated before anything touches the database.
//!
//! ```toml
//! database_url = "mysql://jobq@127.0.0.1:3306/app"
//! database_password_file = "/run/secrets/jobq-db"   # the password, kept out of the URL
//! database_ssl_mode = "verify_identity"              # TLS: disabled, preferred (default), required,
//!                                                    # verify_ca, verify_identity
//! database_ssl_ca = "/etc/jobq/db-ca.pem"            # the CA the server's certificate must chain to
//! workers = 2                                        # processes `jobq supervise` keeps (-n overrides)
//!
//! [worker]
//! queues = ["default", "mail"]   # claimed in this order
//! concurrency = 10               # jobs run at once per worker process
//! batch_size = 10                # most rows one claim takes
//! poll_interval = "2s"           # one server-side idle wait per interval
//! shutdown_grace = "30s"         # how long running jobs get to finish on SIGTERM
//! default_timeout = "30m"        # run-time limit for jobs with no timeout of their own
//!
//! [retry]
//! base = "2s"                    # first backoff; doubles per attempt, with jitter
//! cap = "1h"                     # longest backoff
//!
//! [prune]
//! retention = "7d"               # finished jobs are kept this long
//!
//! [reaper]
//! interval = "2s"                # time between passes
//! lease = "60s"                  # a claimant whose heartbeat is older is gone
//! session_signals = true         # false behind a proxy that multiplexes sessions
//!
//! [scheduler]
//! interval = "1s"                # time between ticks
//! max_jobs_per_tick = 100        # most jobs one tick creates
//!
//! [supervisor]
//! restart_delay = "1s"           # wait before restarting a worker that died young; doubles
//! max_restart_delay = "30s"      # up to this while it keeps dying
//! stable_after = "10s"           # a worker that lived this long is restarted at once
//!
//! [handlers.resize]              # a command: payload on stdin, exit 0 = done
//! command = ["/usr/local/bin/resize", "--fast"]
//! timeout = "5m"
//! env = { IMAGE_DIR = "/srv/images" }
//!
//! [handlers.fetch]               # per-kind attempts and backoff; exit 75 snoozes the job
//! command = ["/usr/local/bin/fetch-feed"]
//! max_attempts = 5
//! retry_base = "30s"
//! retry_cap = "10m"
//! snooze = "15m"
//!
//! [handlers.rollup]              # an SQL statement, parameters bound from payload fields
//! sql = "CALL rollup(?, ?)"
//! params = ["day", "region"]
//! ```
//!
//! One file can serve several databases, each in a `[databases.NAME]` section that is a whole config of
//! its own laid over the top level (see [`Config::database`] and the `databases` module for the merge
//! rules); `jobq supervise` then serves every section, and `--database NAME` picks one for any command:
//!
//! ```toml
//! [worker]
//! concurrency = 20               # shared by every database unless a section sets its own
//!
//! [databases.shop]
//! database_url = "mysql://jobq@db1/shop"
//! workers = 4
//! [databases.shop.handlers.invoice]
//! command = ["/usr/local/bin/invoice"]
//!
//! [databases.crm]
//! database_url = "mysql://jobq@db2/crm"
//! [databases.crm.handlers.sync]
//! sql = "CALL crm_sync(?)"
//! params = ["account"]
//! ```

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::db::SslMode;
use crate::error::{Error, Result};
use crate::handler::{HandlerOptions, HandlerSpec, Handlers};
use crate::name::Name;
use crate::reaper::ReaperConfig;
use crate::retry::RetryPolicy;
use crate::scheduler::SchedulerConfig;
use crate::worker::WorkerConfig;

mod databases;
mod handler;
mod sections;

pub use crate::duration::HumanDuration;
pub use handler::HandlerConfig;
pub use sections::{
    PruneSection, ReaperSection, RetrySection, SchedulerSection, SupervisorSection, WorkerSection,
};

/// The parsed file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Used when neither `--database-url` nor `JOBQ_DATABASE_URL`/`DATABASE_URL` is set.
    pub database_url: Option<String>,
    /// A file whose content (one trailing newline trimmed) is the database password, replacing any in
    /// the URL; `JOBQ_DATABASE_PASSWORD_FILE` overrides it. Keeps the secret out of the URL, the
    /// environment and this file (e.g. a systemd credential or a Kubernetes secret volume).
    pub database_password_file: Option<PathBuf>,
    /// How the connection to the server is protected; replaces the URL's `ssl-mode`, and
    /// `JOBQ_DATABASE_SSL_MODE` overrides it. Unset everywhere: [`SslMode::DEFAULT`] (`preferred`, which
    /// does not stop an active attacker; production should use `verify_identity` with a CA file).
    pub database_ssl_mode: Option<SslMode>,
    /// A PEM file of the CA certificate(s) the server's certificate must chain to, used with
    /// `verify_ca` and `verify_identity`; replaces the URL's `ssl-ca`, and `JOBQ_DATABASE_SSL_CA`
    /// overrides it.
    pub database_ssl_ca: Option<PathBuf>,
    /// Worker settings; command-line flags override them.
    #[serde(default)]
    pub worker: WorkerSection,
    /// Retry backoff.
    #[serde(default)]
    pub retry: RetrySection,
    /// Pruning of finished jobs.
    #[serde(default)]
    pub prune: PruneSection,
    /// The reaper.
    #[serde(default)]
    pub reaper: ReaperSection,
    /// The scheduler.
    #[serde(default)]
    pub scheduler: SchedulerSection,
    /// How `jobq supervise` restarts its workers.
    #[serde(default)]
    pub supervisor: SupervisorSection,
    /// Handlers by job kind.
    #[serde(default)]
    pub handlers: BTreeMap<String, HandlerConfig>,
    /// Schedules by name, upserted by the scheduler when it starts (see
    /// [`crate::schedule::ScheduleSection`]).
    #[serde(default)]
    pub schedules: BTreeMap<String, crate::schedule::ScheduleSection>,
    /// Worker processes `jobq supervise` keeps (its `-n` overrides it).
    pub workers: Option<u32>,
    /// The `[databases.NAME]` sections, each already merged over the top level (see the
    /// `databases` module): one file serving several databases. Empty for a file of one database.
    /// [`Config::load`] fills it; the typed parse of the file only skips the raw sections.
    #[serde(default, deserialize_with = "skip_sections")]
    pub databases: BTreeMap<String, Config>,
}

/// Lets the typed parse accept `[databases]` (resolved apart, from the file's table) without reading it.
fn skip_sections<'de, D>(d: D) -> std::result::Result<BTreeMap<String, Config>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    serde::de::IgnoredAny::deserialize(d)?;
    Ok(BTreeMap::new())
}

/// `Err` naming `key` when `value` is zero: a zero interval is a busy loop at best, and
/// `tokio::time::interval` panics on it.
fn check_positive(key: &str, value: Option<Duration>) -> std::result::Result<(), String> {
    match value {
        Some(d) if d.is_zero() => Err(format!("{key} must be above zero")),
        _ => Ok(()),
    }
}

/// `Err` naming `key` when `value` is outside 1..=[`WorkerConfig::MAX_CONCURRENCY`].
fn check_concurrency(key: &str, value: Option<u32>) -> std::result::Result<(), String> {
    let max = WorkerConfig::MAX_CONCURRENCY;
    match value {
        Some(0) => Err(format!("{key} must be at least 1")),
        Some(n) if n > max => Err(format!(
            "{key} = {n} is above the maximum of {max} jobs per worker process; \
             run more worker processes instead"
        )),
        _ => Ok(()),
    }
}

impl Config {
    /// Reads and validates a file. Errors name the file, and the line and key where TOML allows.
    pub fn load(path: &Path) -> Result<Config> {
        let err = |message: String| Error::Config {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let parse_error = |e: toml::de::Error| err(e.to_string().trim().to_string());
        // Typed first, so that errors at the top level name their line.
        let mut cfg: Config = toml::from_str(&text).map_err(parse_error)?;
        cfg.validate().map_err(err)?;
        let table: toml::Table = toml::from_str(&text).map_err(parse_error)?;
        cfg.databases = databases::resolve(&table).map_err(err)?;
        Ok(cfg)
    }

    /// The config of the `[databases.NAME]` section, merged over the top level.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the sections there are, when there is none called `name`.
    pub fn database(&self, name: &str) -> Result<&Config> {
        self.databases.get(name).ok_or_else(|| {
            let reason = if self.databases.is_empty() {
                format!("{name:?}: the config has no [databases.NAME] sections")
            } else {
                format!(
                    "{name:?}: the config has no [databases.{name}] section; it has {}",
                    self.databases
                        .keys()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            Error::invalid("database", reason)
        })
    }

    /// Finds the file to read: `explicit` (from `--config` or `JOBQ_CONFIG`) if given, else `jobq.toml` in
    /// the current directory if there is one.
    pub fn locate(explicit: Option<&Path>) -> Option<PathBuf> {
        match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => {
                let p = PathBuf::from("jobq.toml");
                p.exists().then_some(p)
            }
        }
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let w = &self.worker;
        if let Some(queues) = &w.queues {
            if queues.is_empty() {
                return Err("worker.queues: list at least one queue".into());
            }
            for q in queues {
                Name::Queue
                    .check(q)
                    .map_err(|e| format!("worker.queues: {e}"))?;
            }
        }
        check_concurrency("worker.concurrency", w.concurrency)?;
        if let Some(n) = self.workers {
            let max = crate::admin::scale::Scale::MAX_WORKERS;
            if n == 0 || n > max {
                return Err(format!("workers = {n}: keep 1 to {max} worker processes"));
            }
        }
        if w.batch_size == Some(0) {
            return Err("worker.batch_size must be at least 1".into());
        }
        check_positive("worker.poll_interval", w.poll_interval.map(|d| d.0))?;
        check_positive(
            "worker.heartbeat_interval",
            w.heartbeat_interval.map(|d| d.0),
        )?;
        check_positive("reaper.interval", self.reaper.interval.map(|d| d.0))?;
        check_positive("reaper.lease", self.reaper.lease.map(|d| d.0))?;
        check_positive("scheduler.interval", self.scheduler.interval.map(|d| d.0))?;
        if self.scheduler.max_jobs_per_tick == Some(0) {
            return Err("scheduler.max_jobs_per_tick must be at least 1".into());
        }
        self.supervisor
            .apply(crate::SupervisorConfig::new(1, PathBuf::new()))?;
        let global = self.retry_policy()?;
        for (kind, h) in &self.handlers {
            Name::Kind
                .check(kind)
                .map_err(|e| format!("handlers.{kind}: {e}"))?;
            h.spec().map_err(|e| format!("handlers.{kind}: {e}"))?;
            h.options(global)
                .map_err(|e| format!("handlers.{kind}: {e}"))?;
        }
        crate::schedule::validate_sections(&self.schedules)?;
        Ok(())
    }

    /// Validated handler specs with their per-kind settings (entries that do not validate are left
    /// out: [`Config::load`] refuses them first).
    pub fn handler_specs(&self) -> Vec<(String, HandlerSpec, HandlerOptions)> {
        let global = self.retry_policy().unwrap_or_default();
        self.handlers
            .iter()
            .filter_map(|(kind, h)| {
                let spec = h.spec().ok()?;
                let options = h.options(global).ok()?;
                Some((kind.clone(), spec, options))
            })
            .collect()
    }

    /// The retry backoff of `[retry]`, with the defaults for keys not set.
    ///
    /// # Errors
    /// When `base` is zero (every retry would follow at once) or `cap` is below `base` (the backoff
    /// could never reach its own first step).
    pub fn retry_policy(&self) -> std::result::Result<RetryPolicy, String> {
        let r = &self.retry;
        let policy = RetryPolicy {
            base: r.base.map_or(RetryPolicy::DEFAULT_BASE, |d| d.0),
            cap: r.cap.map_or(RetryPolicy::DEFAULT_CAP, |d| d.0),
        };
        check_positive("retry.base", Some(policy.base))?;
        if policy.cap < policy.base {
            return Err(format!(
                "retry.cap ({}) is below retry.base ({}){}",
                humantime::format_duration(policy.cap),
                humantime::format_duration(policy.base),
                if r.cap.is_none() {
                    " (the default cap); set retry.cap too"
                } else {
                    ""
                }
            ));
        }
        policy.check("retry.base", "retry.cap")?;
        Ok(policy)
    }

    /// Checks that the program of every command and process handler can be started, the way the worker will start it:
    /// a program given by path must exist and be executable; a bare name must be found on `PATH` (the
    /// handler's own `env.PATH` if it sets one, else the worker's). Run when a worker starts, so a typo
    /// is one clear error at start-up instead of every job of the kind failing its attempts one by one.
    /// Every HTTP handler is built the same way: its secret and CA files must be there and readable.
    ///
    /// # Errors
    /// [`Error::Handler`] naming the kind and the program (or the file).
    pub fn check_programs(&self) -> Result<()> {
        for (kind, spec, _) in self.handler_specs() {
            let (argv, env, inherit_env) = match &spec {
                HandlerSpec::Command {
                    argv,
                    env,
                    inherit_env,
                    ..
                } => (argv, env, inherit_env),
                HandlerSpec::Process(p) => (&p.argv, &p.env, &p.inherit_env),
                HandlerSpec::Sql { .. } => continue,
                HandlerSpec::Http(http) => {
                    http.build()
                        .map_err(|reason| Error::Handler { kind, reason })?;
                    continue;
                }
            };
            // The PATH the program will see: its own, else the worker's unless `inherit_env` leaves
            // it out.
            let inherits_path = inherit_env
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == "PATH"));
            let path = env
                .get("PATH")
                .map(OsString::from)
                .or_else(|| inherits_path.then(|| std::env::var_os("PATH")).flatten());
            crate::handler::program::find_program(&argv[0], path.as_deref())
                .map_err(|reason| Error::Handler { kind, reason })?;
        }
        Ok(())
    }

    /// The command, SQL and HTTP handlers of `[handlers.KIND]`. Rows never carry code: the program,
    /// statement or URL comes from this file only, and a row's payload is passed as data. SQL handlers
    /// run on `pool`.
    ///
    /// # Errors
    /// When a command handler's program cannot be found or is not executable (see
    /// [`Config::check_programs`]).
    pub fn handlers(&self, pool: &sqlx::MySqlPool) -> Result<Handlers> {
        self.check_programs()?;
        let mut handlers = Handlers::new();
        for (kind, spec, options) in self.handler_specs() {
            handlers = handlers.register_spec(&kind, spec, options, pool)?;
        }
        Ok(handlers)
    }

    /// Retention of finished jobs: `prune.retention`, else [`ReaperConfig::DEFAULT_RETENTION`].
    pub fn retention(&self) -> Duration {
        self.prune
            .retention
            .map_or(ReaperConfig::DEFAULT_RETENTION, |d| d.0)
    }

    /// The worker settings of `[worker]` and `[retry]`, the defaults for keys not set. The mode is the
    /// library's default; the `jobq` binary sets its own.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the key, for values a loaded file could not have (see
    /// [`Config::load`]): a config built in code is checked here.
    pub fn worker(&self) -> Result<WorkerConfig> {
        self.validate().map_err(|m| Error::invalid("config", m))?;
        let file = &self.worker;
        let d = WorkerConfig::default();
        let or = |v: Option<HumanDuration>, default: Duration| v.map_or(default, |v| v.0);
        Ok(WorkerConfig {
            queues: file.queues.clone().unwrap_or(d.queues),
            concurrency: file.concurrency.unwrap_or(d.concurrency),
            batch_size: file.batch_size.unwrap_or(d.batch_size),
            poll_interval: or(file.poll_interval, d.poll_interval),
            shutdown_grace: or(file.shutdown_grace, d.shutdown_grace),
            default_timeout: or(file.default_timeout, d.default_timeout),
            heartbeat_interval: or(file.heartbeat_interval, d.heartbeat_interval),
            fence_after: or(file.fence_after, d.fence_after),
            retry: self
                .retry_policy()
                .map_err(|m| Error::invalid("config", m))?,
            ..d
        })
    }

    /// The reaper settings of `[reaper]`, with `[prune]`'s retention and `[worker]`'s heartbeat (the
    /// reaper judges claimants by the interval they promise), the defaults for keys not set.
    ///
    /// # Errors
    /// As [`Config::worker`].
    pub fn reaper(&self) -> Result<ReaperConfig> {
        self.validate().map_err(|m| Error::invalid("config", m))?;
        let file = &self.reaper;
        let d = ReaperConfig::default();
        let or = |v: Option<HumanDuration>, default: Duration| v.map_or(default, |v| v.0);
        Ok(ReaperConfig {
            interval: or(file.interval, d.interval),
            lease: or(file.lease, d.lease),
            session_signals: file.session_signals.unwrap_or(d.session_signals),
            heartbeat_interval: or(self.worker.heartbeat_interval, d.heartbeat_interval),
            retention: Some(self.retention()),
            unserved_after: or(file.unserved_after, d.unserved_after),
            long_wait: or(file.long_wait, d.long_wait),
            ..d
        })
    }

    /// The scheduler settings of `[scheduler]`, with the `[schedules.NAME]` sections as its
    /// definitions, the defaults for keys not set.
    ///
    /// # Errors
    /// As [`Config::worker`], and a schedule section that does not make a definition.
    pub fn scheduler(&self) -> Result<SchedulerConfig> {
        self.validate().map_err(|m| Error::invalid("config", m))?;
        let definitions = self
            .schedules
            .iter()
            .map(|(name, s)| s.to_def(name))
            .collect::<Result<Vec<_>>>()?;
        let file = &self.scheduler;
        let d = SchedulerConfig::default();
        Ok(SchedulerConfig {
            interval: file.interval.map_or(d.interval, |v| v.0),
            max_jobs_per_tick: file.max_jobs_per_tick.unwrap_or(d.max_jobs_per_tick),
            definitions,
            ..d
        })
    }
}

#[cfg(test)]
mod tests;
