//! `jobq worker`.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use jobq::config::{HumanDuration, WorkerSection};
use jobq::{Mode, Worker, WorkerConfig};

use super::Env;
use crate::options::{MetricsArgs, human, parse_duration, parse_interval, set};

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

/// Worker settings from flags, then the config file, then the defaults (flags were checked as they
/// were parsed, the file when it was loaded).
pub fn config(env: &Env, args: &WorkerOptions, forever: bool) -> Result<WorkerConfig> {
    let mut config = env.config.clone();
    args.overlay(&mut config.worker);
    let mut cfg = config.worker()?;
    cfg.mode = if forever { Mode::Forever } else { Mode::Drain };
    Ok(cfg)
}

pub async fn run(env: &Env, args: WorkerArgs) -> Result<()> {
    let supervisor = crate::process::watch_parent()?;
    let cfg = config(env, &args.opts, args.forever)?;
    if env.config.handlers.is_empty() {
        match &env.config_path {
            Some(p) => bail!(
                "{} defines no handlers; add a [handlers.KIND] section with `command`, `sql`, `url` or `process`",
                p.display()
            ),
            None => bail!(
                "no config file: pass --config jobq.toml (or set JOBQ_CONFIG) with [handlers.KIND] sections"
            ),
        }
    }
    // A handler whose program is missing would fail every job of its kind; say so before starting.
    env.config.check_programs()?;
    let shutdown = crate::process::on_signals_or_orphaned(supervisor)?;
    // A forever worker waits for a database that is not there yet (it checks the schema when it
    // registers); a draining one (cron) fails at once, and the next tick tries again.
    let pool = if args.forever {
        env.service_pool(cfg.pool_size())?
    } else {
        env.migrated_pool(cfg.pool_size()).await?
    };
    if let Some(addr) = args.metrics.metrics_addr {
        crate::metrics::serve(addr, pool.clone(), shutdown.clone()).await?;
    }
    let handlers = env.config.handlers(&pool)?;
    let worker = Worker::new(pool.clone(), handlers, cfg)?;
    worker.run(shutdown).await?;
    pool.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

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
