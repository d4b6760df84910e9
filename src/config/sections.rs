//! The settings tables of `jobq.toml`: `[worker]`, `[retry]`, `[prune]`, `[reaper]` and `[scheduler]`, each
//! key optional (the built-in default stands in for a key not set).

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
