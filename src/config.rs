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
//! [handlers.resize]              # a command: payload on stdin, exit 0 = done
//! command = ["/usr/local/bin/resize", "--fast"]
//! timeout = "5m"
//! env = { IMAGE_DIR = "/srv/images" }
//!
//! [handlers.rollup]              # an SQL statement, parameters bound from payload fields
//! sql = "CALL rollup(?, ?)"
//! params = ["day", "region"]
//! ```

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::db::SslMode;
use crate::db::enqueue::validate_name;
use crate::error::{Error, Result};
use crate::retry::RetryPolicy;

/// A duration written the human way: `"500ms"`, `"30s"`, `"5m"`, `"7d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(HumanDuration)
            .map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
    }
}

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
    /// Handlers by job kind.
    #[serde(default)]
    pub handlers: BTreeMap<String, HandlerConfig>,
    /// Schedules by name, upserted by the scheduler when it starts (see
    /// [`crate::scheduler::ScheduleSection`]).
    #[serde(default)]
    pub schedules: BTreeMap<String, crate::scheduler::ScheduleSection>,
}

/// `[worker]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSection {
    /// Queues to claim from, in order.
    pub queues: Option<Vec<String>>,
    /// Jobs run at once.
    pub concurrency: Option<u32>,
    /// Most rows per claim.
    pub batch_size: Option<u32>,
    /// Longest idle wait between polls.
    pub poll_interval: Option<HumanDuration>,
    /// Time running jobs get on shutdown.
    pub shutdown_grace: Option<HumanDuration>,
    /// Run-time limit of jobs with none of their own.
    pub default_timeout: Option<HumanDuration>,
    /// How often the worker refreshes its registry row.
    pub heartbeat_interval: Option<HumanDuration>,
    /// How long the worker may go without writing its heartbeat before it stops its running jobs
    /// (self-fencing; at least three heartbeat intervals).
    pub fence_after: Option<HumanDuration>,
}

/// `[retry]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySection {
    /// First backoff.
    pub base: Option<HumanDuration>,
    /// Longest backoff.
    pub cap: Option<HumanDuration>,
}

/// `[prune]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneSection {
    /// How long finished jobs are kept (default 7 days).
    pub retention: Option<HumanDuration>,
}

/// `[reaper]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaperSection {
    /// Time between passes (default 2 s).
    pub interval: Option<HumanDuration>,
    /// Heartbeat age after which a claimant is gone (default 60 s).
    pub lease: Option<HumanDuration>,
    /// Whether to trust database sessions (default true; false behind a session-multiplexing proxy).
    pub session_signals: Option<bool>,
    /// How long due jobs may wait with no live worker to claim them before the reaper warns (default
    /// 5 min).
    pub unserved_after: Option<HumanDuration>,
}

/// `[handlers.KIND]`: exactly one of `command` or `sql`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerConfig {
    /// Program and arguments; the payload goes to its stdin.
    pub command: Option<Vec<String>>,
    /// Extra environment for the command.
    pub env: Option<BTreeMap<String, String>>,
    /// When set, only these variables of the worker's environment reach the command (besides `env`
    /// and the job's own `JOBQ_*` variables). Unset: all of them, except jobq's secrets (see
    /// [`crate::handler::command`]).
    pub inherit_env: Option<Vec<String>>,
    /// One SQL statement with `?` placeholders.
    pub sql: Option<String>,
    /// Payload fields bound to the placeholders, in order.
    pub params: Option<Vec<String>>,
    /// Run-time limit for jobs of this kind that set none themselves.
    pub timeout: Option<HumanDuration>,
}

/// A handler definition after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerSpec {
    /// Run a program.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Extra environment.
        env: BTreeMap<String, String>,
        /// The only inherited variables, when set.
        inherit_env: Option<Vec<String>>,
    },
    /// Run one SQL statement.
    Sql {
        /// The statement.
        sql: String,
        /// Payload fields for its placeholders.
        params: Vec<String>,
    },
}

/// Default retention of finished jobs: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Most jobs one worker process may run at once (`worker.concurrency`, `--concurrency`): 10,000.
///
/// A worker's pool is sized `concurrency + 2` connections, and the driver allocates its queue of idle
/// connections for that many up front: `--concurrency 4000000000` asked for about 192 GB and the process
/// aborted. Nothing useful lies near such values either: every running SQL handler holds a connection
/// (MariaDB allows 151 by default), every running command is a process, and the best drain `jobq bench`
/// found used 2,000. Past 10,000 jobs at once, run more worker processes.
pub const MAX_CONCURRENCY: u32 = 10_000;

/// `Err` naming `key` when `value` is zero: a zero interval is a busy loop at best, and
/// `tokio::time::interval` panics on it.
pub fn check_positive(key: &str, value: Option<Duration>) -> std::result::Result<(), String> {
    match value {
        Some(d) if d.is_zero() => Err(format!("{key} must be above zero")),
        _ => Ok(()),
    }
}

/// `Err` naming `key` when `value` is outside 1..=[`MAX_CONCURRENCY`].
pub fn check_concurrency(key: &str, value: Option<u32>) -> std::result::Result<(), String> {
    match value {
        Some(0) => Err(format!("{key} must be at least 1")),
        Some(n) if n > MAX_CONCURRENCY => Err(format!(
            "{key} = {n} is above the maximum of {MAX_CONCURRENCY} jobs per worker process; \
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
        let cfg: Config =
            toml::from_str(&text).map_err(|e| err(e.to_string().trim().to_string()))?;
        cfg.validate().map_err(err)?;
        Ok(cfg)
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
                validate_name("queue", q, 64).map_err(|e| format!("worker.queues: {e}"))?;
            }
        }
        check_concurrency("worker.concurrency", w.concurrency)?;
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
        self.retry_policy()?;
        for (kind, h) in &self.handlers {
            validate_name("kind", kind, 128).map_err(|e| format!("handlers.{kind}: {e}"))?;
            h.spec().map_err(|e| format!("handlers.{kind}: {e}"))?;
        }
        crate::scheduler::def::validate_sections(&self.schedules)?;
        Ok(())
    }

    /// Validated handler specs with their per-kind timeouts.
    pub fn handler_specs(&self) -> Vec<(String, HandlerSpec, Option<Duration>)> {
        self.handlers
            .iter()
            .filter_map(|(kind, h)| {
                h.spec()
                    .ok()
                    .map(|spec| (kind.clone(), spec, h.timeout.map(|t| t.0)))
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
        Ok(policy)
    }

    /// Checks that the program of every command handler can be started, the way the worker will start it:
    /// a program given by path must exist and be executable; a bare name must be found on `PATH` (the
    /// handler's own `env.PATH` if it sets one, else the worker's). Run when a worker starts, so a typo
    /// is one clear error at start-up instead of every job of the kind failing its attempts one by one.
    ///
    /// # Errors
    /// [`Error::Handler`] naming the kind and the program.
    pub fn check_programs(&self) -> Result<()> {
        for (kind, spec, _) in self.handler_specs() {
            if let HandlerSpec::Command {
                argv,
                env,
                inherit_env,
            } = &spec
            {
                // The PATH the command will see: its own, else the worker's unless `inherit_env`
                // leaves it out.
                let inherits_path = inherit_env
                    .as_ref()
                    .is_none_or(|names| names.iter().any(|n| n == "PATH"));
                let path = env
                    .get("PATH")
                    .map(OsString::from)
                    .or_else(|| inherits_path.then(|| std::env::var_os("PATH")).flatten());
                find_program(&argv[0], path.as_deref())
                    .map_err(|reason| Error::Handler { kind, reason })?;
            }
        }
        Ok(())
    }

    /// Retention of finished jobs.
    pub fn retention(&self) -> Duration {
        self.prune.retention.map_or(DEFAULT_RETENTION, |d| d.0)
    }
}

impl HandlerConfig {
    /// Checks that the entry is one complete handler and turns it into a spec.
    pub fn spec(&self) -> std::result::Result<HandlerSpec, String> {
        match (&self.command, &self.sql) {
            (Some(_), Some(_)) => Err("set either `command` or `sql`, not both".into()),
            (None, None) => Err("set `command` (a program) or `sql` (a statement)".into()),
            (Some(argv), None) => {
                if self.params.is_some() {
                    return Err(
                        "`params` belongs to `sql` handlers; a command reads the payload on stdin"
                            .into(),
                    );
                }
                if argv.is_empty() || argv[0].is_empty() {
                    return Err(
                        "`command` must name a program: command = [\"prog\", \"arg\"]".into(),
                    );
                }
                Ok(HandlerSpec::Command {
                    argv: argv.clone(),
                    env: self.env.clone().unwrap_or_default(),
                    inherit_env: self.inherit_env.clone(),
                })
            }
            (None, Some(sql)) => {
                if self.env.is_some() || self.inherit_env.is_some() {
                    return Err("`env` and `inherit_env` belong to `command` handlers".into());
                }
                let params = self.params.clone().unwrap_or_default();
                let placeholders = count_placeholders(sql);
                if placeholders != params.len() {
                    return Err(format!(
                        "`sql` has {placeholders} `?` placeholder(s) but `params` names {} field(s)",
                        params.len()
                    ));
                }
                if sql.trim().trim_end_matches(';').contains(';') {
                    return Err(
                        "`sql` must be one statement; wrap several in a procedure and CALL it"
                            .into(),
                    );
                }
                Ok(HandlerSpec::Sql {
                    sql: sql.trim().trim_end_matches(';').to_string(),
                    params,
                })
            }
        }
    }
}

/// The search path `execvp` uses when `PATH` is not set (glibc's default).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Where `program` is found, as the worker's spawn will look for it: a name with a `/` is a path (relative
/// to the working directory), any other name is searched in the directories of `path`.
///
/// # Errors
/// A sentence saying why the program cannot be run: missing, a directory, not executable, not on the path.
pub fn find_program(program: &str, path: Option<&OsStr>) -> std::result::Result<PathBuf, String> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return match executable(&p) {
            Ok(()) => Ok(p),
            Err(why) => Err(format!("command {program:?} {why}")),
        };
    }
    let dirs = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    for dir in std::env::split_paths(dirs) {
        // An empty entry in PATH means the working directory.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if executable(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "command {program:?} is not found on PATH ({}); give its full path or fix PATH",
        dirs.to_string_lossy()
    ))
}

/// `Ok` when `p` is a file with an execute bit (even root cannot exec a file without one).
fn executable(p: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_string(),
        _ => format!("cannot be read: {e}"),
    })?;
    if meta.is_dir() {
        return Err("is a directory".into());
    }
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err(format!("is not executable (mode {:o})", mode & 0o7777));
    }
    Ok(())
}

/// Counts `?` outside quoted strings and backquoted names.
fn count_placeholders(sql: &str) -> usize {
    let mut n = 0;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == '\\' && q != '`' => {
                chars.next();
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '\'' | '"' | '`') => quote = Some(c),
            None if c == '?' => n += 1,
            None => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<Config, String> {
        let dir = std::env::temp_dir().join(format!("jobq-cfg-{}", rand::random::<u64>()));
        std::fs::write(&dir, text).unwrap();
        let r = Config::load(&dir).map_err(|e| e.to_string());
        std::fs::remove_file(&dir).ok();
        r
    }

    #[test]
    fn full_example_parses() {
        let c = parse(
            r#"
database_url = "mysql://u:p@h:3306/db"
[worker]
queues = ["default", "mail"]
concurrency = 4
poll_interval = "250ms"
[retry]
base = "1s"
[prune]
retention = "2d"
[handlers.resize]
command = ["convert", "-"]
timeout = "5m"
env = { A = "1" }
[handlers.rollup]
sql = "CALL rollup(?, ?)"
params = ["day", "region"]
"#,
        )
        .unwrap();
        assert_eq!(c.worker.concurrency, Some(4));
        assert_eq!(c.retention(), Duration::from_secs(2 * 86400));
        let specs = c.handler_specs();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].0, "resize");
        assert_eq!(specs[1].2, None);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse("[worker]\nconcurency = 3\n").unwrap_err();
        assert!(e.contains("concurency"), "{e}");
        let e = parse("[handlers.x]\ncommand = [\"a\"]\nargs = []\n").unwrap_err();
        assert!(e.contains("args"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = parse("[worker]\npoll_interval = \"soon\"\n").unwrap_err();
        assert!(e.contains("invalid duration \"soon\""), "{e}");
        let e = parse("[handlers.x]\nsql = \"CALL p(?, ?)\"\nparams = [\"a\"]\n").unwrap_err();
        assert!(e.contains("handlers.x") && e.contains("2 `?`"), "{e}");
        let e = parse("[handlers.x]\nsql = \"DO 1\"\ncommand = [\"true\"]\n").unwrap_err();
        assert!(e.contains("not both"), "{e}");
        let e = parse("[handlers.x]\n").unwrap_err();
        assert!(e.contains("set `command`"), "{e}");
        let e = parse("[handlers.\"bad kind\"]\ncommand = [\"true\"]\n").unwrap_err();
        assert!(e.contains("bad kind"), "{e}");
        let e = parse("[worker]\nconcurrency = 0\n").unwrap_err();
        assert!(e.contains("worker.concurrency"), "{e}");
    }

    #[test]
    fn zero_intervals_huge_concurrency_and_a_cap_below_base_are_named() {
        for (text, needle) in [
            ("[worker]\npoll_interval = \"0s\"\n", "worker.poll_interval"),
            (
                "[worker]\nheartbeat_interval = \"0s\"\n",
                "worker.heartbeat_interval",
            ),
            ("[reaper]\ninterval = \"0s\"\n", "reaper.interval"),
            ("[reaper]\nlease = \"0ms\"\n", "reaper.lease"),
            ("[retry]\nbase = \"0s\"\n", "retry.base"),
            ("[worker]\nconcurrency = 10001\n", "10000"),
            (
                "[retry]\nbase = \"10s\"\ncap = \"5s\"\n",
                "retry.cap (5s) is below retry.base (10s)",
            ),
            ("[retry]\nbase = \"2h\"\n", "set retry.cap too"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        assert!(parse("[worker]\nconcurrency = 10000\n[retry]\nbase = \"1h\"\n").is_ok());
    }

    #[test]
    fn programs_are_found_as_exec_finds_them() {
        let path = Some(OsStr::new("/nonexistent:/bin:/usr/bin"));
        assert!(find_program("sh", path).is_ok());
        let e = find_program("no-such-program-xyz", path).unwrap_err();
        assert!(
            e.contains("not found on PATH") && e.contains("/nonexistent"),
            "{e}"
        );
        let e = find_program("/no/such/file", path).unwrap_err();
        assert!(e.contains("\"/no/such/file\" does not exist"), "{e}");
        let e = find_program("/tmp", path).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let file = std::env::temp_dir().join(format!("jobq-noexec-{}", rand::random::<u64>()));
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        let e = find_program(file.to_str().unwrap(), path).unwrap_err();
        assert!(e.contains("not executable (mode 644)"), "{e}");
        std::fs::remove_file(&file).ok();
    }

    #[test]
    fn placeholders_inside_strings_do_not_count() {
        assert_eq!(count_placeholders("SELECT '?', \"?\", `?`, ?"), 1);
        assert_eq!(count_placeholders("SELECT 'it\\'s ?', ?"), 1);
    }
}
