//! The settings tables of `jobq.toml`: `[worker]`, `[retry]`, `[prune]`, `[reaper]`, `[scheduler]` and
//! `[supervisor]`, each key optional (the built-in default stands in for a key not set).

use serde::Deserialize;

use super::HumanDuration;

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
    /// How long a job may wait for other jobs before the `jobq_waiting_long_jobs` gauge and `jobq
    /// stats` count it (default 1 h).
    pub long_wait: Option<HumanDuration>,
}

/// `[scheduler]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSection {
    /// Time between ticks of a `--forever` scheduler (default 1 s).
    pub interval: Option<HumanDuration>,
    /// Most jobs one tick creates (default 100).
    pub max_jobs_per_tick: Option<u32>,
}

/// `[supervisor]`: how `jobq supervise` restarts a worker process that exits.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorSection {
    /// The wait before restarting a child that died young; it doubles at each death in a row up to
    /// `max_restart_delay` (default 1 s).
    pub restart_delay: Option<HumanDuration>,
    /// The longest wait before restarting a child that keeps dying (default 30 s).
    pub max_restart_delay: Option<HumanDuration>,
    /// A child that lived this long was working: it is restarted at once, and the delays start over
    /// (default 10 s).
    pub stable_after: Option<HumanDuration>,
}

impl SupervisorSection {
    /// `cfg` with this section's keys applied over its timings.
    ///
    /// # Errors
    /// Naming the key: a zero `stable_after` (every death would count as a healthy child's, restarted at
    /// once, so a worker that cannot start would spin), or `max_restart_delay` below `restart_delay`.
    pub fn apply(
        &self,
        mut cfg: crate::SupervisorConfig,
    ) -> std::result::Result<crate::SupervisorConfig, String> {
        if let Some(d) = self.restart_delay {
            cfg.min_backoff = d.0;
        }
        if let Some(d) = self.max_restart_delay {
            cfg.max_backoff = d.0;
        }
        if let Some(d) = self.stable_after {
            cfg.stable_after = d.0;
        }
        if cfg.stable_after.is_zero() {
            return Err("supervisor.stable_after must be above zero".into());
        }
        if cfg.max_backoff < cfg.min_backoff {
            return Err(format!(
                "supervisor.max_restart_delay ({}) is below supervisor.restart_delay ({}): a child that \
                 keeps dying could never wait its own first delay",
                humantime::format_duration(cfg.max_backoff),
                humantime::format_duration(cfg.min_backoff),
            ));
        }
        Ok(cfg)
    }
}
