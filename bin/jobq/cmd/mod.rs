//! One module per subcommand: arguments in, library call, output out.

pub(crate) mod bench;
pub(crate) mod enable;
pub(crate) mod enqueue;
pub(crate) mod jobs;
pub(crate) mod limit;
pub(crate) mod migrate;
mod notice;
pub(crate) mod prune;
pub(crate) mod queue;
pub(crate) mod reaper;
pub(crate) mod scale;
pub(crate) mod schedule;
pub(crate) mod scheduler;
pub(crate) mod stats;
pub(crate) mod supervise;
pub(crate) mod web;
pub(crate) mod worker;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use jobq::config::Config;
use jobq::{ConnectConfig, SslMode, UrlSettings};
use sqlx::MySqlPool;

use crate::args::{Cli, Command};

/// Pool size of a command that runs its statements one after another and exits (enqueue, jobs,
/// stats): one connection is all it uses.
const SERIAL_CONNECTIONS: u32 = 1;
/// Pool size of a one-off pass of library work (prune, schedule management, a scheduler pass from
/// cron): one connection in use and a spare.
const ONE_OFF_CONNECTIONS: u32 = 2;
/// Pool size of a service that runs until stopped (reaper, scheduler, supervisor): the library's
/// default small pool.
const SERVICE_CONNECTIONS: u32 = ConnectConfig::DEFAULT_MAX_CONNECTIONS;

/// What every command needs: the config file (if any) and where the database is.
pub struct Env {
    /// The config in effect: the file's, or with `--database NAME` its section merged over the top level.
    pub config: Config,
    pub config_path: Option<PathBuf>,
    /// The `[databases.NAME]` section this command works on, from `--database`.
    pub database: Option<String>,
    /// Where to connect, or `None` when the file serves several databases and none was picked, or no
    /// database is named anywhere.
    target: Option<Target>,
}

/// A database to connect to: its URL with the password file and TLS settings, parsed once; or what is
/// wrong with the URL, told when a command needs the database (one that does not, such as `schedule
/// next --spec`, still runs).
struct Target(std::result::Result<ConnectConfig, String>);

impl Env {
    fn load(cli: &Cli) -> Result<Env> {
        let config_path = Config::locate(cli.config.as_deref());
        let config = match &config_path {
            Some(p) => Config::load(p)?,
            None => Config::default(),
        };
        if let Some(name) = cli.database.as_deref().filter(|s| !s.is_empty()) {
            return Env::section(&config, config_path, name);
        }
        let given = cli
            .database_url
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("DATABASE_URL").ok().filter(|s| !s.is_empty()));
        let url = match given.or_else(|| config.database_url.clone()) {
            Some(url) => url,
            // Several databases and none picked: `supervise` serves them all, other commands ask
            // which. None named at all: no guess (a worker pointed at a database nobody named would
            // run, or prune, someone else's jobs); a command that needs one says so (see `target`),
            // and one that does not (`schedule next --spec`) runs.
            None => {
                return Ok(Env {
                    config,
                    config_path,
                    database: None,
                    target: None,
                });
            }
        };
        let target = Target::new(&config, config_path.as_deref(), url)?;
        Ok(Env {
            config,
            config_path,
            database: None,
            target: Some(target),
        })
    }

    /// The env of the file's `[databases.NAME]` section: its merged config and its own URL (never the
    /// flag's or the environment's, which name no section).
    pub fn section(file: &Config, config_path: Option<PathBuf>, name: &str) -> Result<Env> {
        let config = file.database(name)?.clone();
        let url = config
            .database_url
            .clone()
            .with_context(|| format!("databases.{name}: no database_url"))?;
        let target = Target::new(&config, config_path.as_deref(), url)?;
        Ok(Env {
            config,
            config_path,
            database: Some(name.to_string()),
            target: Some(target),
        })
    }

    /// Whether the file serves several databases and no one of them was picked (`supervise` serves
    /// them all).
    pub fn serves_many(&self) -> bool {
        self.target.is_none() && !self.config.databases.is_empty()
    }

    fn target(&self) -> Result<&ConnectConfig> {
        let target = self.target.as_ref().with_context(|| {
            if self.config.databases.is_empty() {
                return format!(
                    "no database named: give --database-url, set JOBQ_DATABASE_URL or DATABASE_URL, \
                     or set database_url in the config file ({})",
                    self.config_path.as_deref().map_or_else(
                        || "none found: --config, $JOBQ_CONFIG or ./jobq.toml".to_string(),
                        |p| p.display().to_string()
                    )
                );
            }
            let names: Vec<&str> = self.config.databases.keys().map(String::as_str).collect();
            format!(
                "the config serves several databases ({}): pass --database NAME (or set JOBQ_DATABASE)",
                names.join(", ")
            )
        })?;
        target.0.as_ref().map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Where to connect: the URL with the password file's password and the TLS settings applied.
    pub fn connect_config(&self) -> Result<&ConnectConfig> {
        self.target()
    }

    /// The URL jobq connects with (password and TLS settings applied).
    pub fn url(&self) -> Result<&str> {
        Ok(self.target()?.url())
    }

    /// The URL as it was given, without the password file's password: what the supervisor passes on to
    /// its workers, which read the password file themselves (its path is in their environment or config).
    pub fn given_url(&self) -> Result<&str> {
        Ok(self.target()?.given_url())
    }

    /// Connects with a pool of `max` connections.
    pub async fn pool(&self, max: u32) -> Result<MySqlPool> {
        Ok(jobq::connect(&self.target()?.clone().max_connections(max)).await?)
    }

    /// A pool for a long-running service, which connects when first used: the service waits for a
    /// database that is not there yet, and checks the schema itself when it registers.
    pub fn service_pool(&self, max: u32) -> Result<MySqlPool> {
        Ok(jobq::connect_lazy(
            &self.target()?.clone().max_connections(max),
        )?)
    }

    /// Connects and checks that the schema is current.
    pub async fn migrated_pool(&self, max: u32) -> Result<MySqlPool> {
        let pool = self.pool(max).await?;
        jobq::ensure_migrated(&pool).await?;
        Ok(pool)
    }
}

impl Target {
    /// `url` with the password file's password and the TLS settings applied. A password file or TLS
    /// setting that cannot be used fails here; what is wrong with the URL itself, when a command needs
    /// the database.
    fn new(config: &Config, config_path: Option<&Path>, url: String) -> Result<Target> {
        let password_file = std::env::var_os("JOBQ_DATABASE_PASSWORD_FILE")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .or_else(|| config.database_password_file.clone());
        let (ssl_mode, ssl_ca) = tls_settings(config, config_path)?;
        let settings = UrlSettings {
            password_file,
            ssl_mode,
            ssl_ca,
        };
        match ConnectConfig::with_settings(url, &settings) {
            Ok(cfg) => Ok(Target(Ok(cfg))),
            Err(e @ jobq::Error::InvalidUrl { .. }) => Ok(Target(Err(e.to_string()))),
            Err(e) => Err(e.into()),
        }
    }
}

/// The TLS settings given apart from the URL: `JOBQ_DATABASE_SSL_MODE`, else `database_ssl_mode`; and
/// `JOBQ_DATABASE_SSL_CA`, else `database_ssl_ca`. Each one set replaces the URL's own (see
/// [`UrlSettings`]). Errors name the variable or the config key they come from.
fn tls_settings(
    config: &Config,
    config_path: Option<&Path>,
) -> Result<(Option<SslMode>, Option<PathBuf>)> {
    let in_config = |key: &str| match config_path {
        Some(p) => format!("{key} in {}", p.display()),
        None => key.to_string(),
    };
    let mode = match std::env::var("JOBQ_DATABASE_SSL_MODE") {
        Ok(s) if !s.is_empty() => Some(s.parse::<SslMode>().context("JOBQ_DATABASE_SSL_MODE")?),
        Ok(_) | Err(std::env::VarError::NotPresent) => config.database_ssl_mode,
        Err(std::env::VarError::NotUnicode(_)) => {
            bail!("JOBQ_DATABASE_SSL_MODE is not valid UTF-8")
        }
    };
    let ca = match std::env::var_os("JOBQ_DATABASE_SSL_CA").filter(|s| !s.is_empty()) {
        Some(path) => Some((PathBuf::from(path), "JOBQ_DATABASE_SSL_CA".to_string())),
        None => config
            .database_ssl_ca
            .clone()
            .map(|path| (path, in_config("database_ssl_ca"))),
    };
    if let Some((path, source)) = &ca {
        jobq::for_the_binary::check_ca_file(path).with_context(|| source.clone())?;
    }
    Ok((mode, ca.map(|(path, _)| path)))
}

pub async fn run(cli: Cli) -> Result<()> {
    let env = Env::load(&cli)?;
    match cli.command {
        Command::Migrate(args) => migrate::run(&env, args).await,
        Command::Enable(args) => enable::enable(&env, args).await,
        Command::Disable(args) => enable::disable(&env, args).await,
        Command::Worker(args) => worker::run(&env, args).await,
        Command::Enqueue(args) => enqueue::run(&env, args).await,
        Command::Stats(args) => stats::run(&env, args).await,
        Command::Jobs(cmd) => jobs::run(&env, cmd).await,
        Command::Queue(cmd) => queue::run(&env, cmd).await,
        Command::Limit(cmd) => limit::run(&env, cmd).await,
        Command::Reaper(args) => reaper::run(&env, args).await,
        Command::Supervise(args) => supervise::run(&env, args).await,
        Command::Scale(args) => scale::run(&env, args).await,
        Command::Schedule(cmd) => schedule::run(&env, cmd).await,
        Command::Scheduler(args) => scheduler::run(&env, args).await,
        Command::Bench(args) => bench::run(&env, args).await,
        Command::BenchWorker(args) => bench::worker(&env, args).await,
        Command::Prune(args) => prune::run(&env, args).await,
        Command::Web(args) => web::run(&env, args).await,
    }
}

/// Who is running this command, for the record: the login name and host. The name is `$USER` (or
/// `$LOGNAME`), else the process's uid as /etc/passwd names it (cron and containers often set neither).
pub(crate) fn actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| uid_name());
    format!("{user}@{}", gethostname::gethostname().to_string_lossy())
}

/// The name of this process's uid in /etc/passwd, else `uid N` (a container's user may have no entry).
fn uid_name() -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return "unknown user".to_string();
    };
    let uid_text = uid.to_string();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| {
            passwd.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                (fields.nth(1)? == uid_text).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| format!("uid {uid}"))
}
