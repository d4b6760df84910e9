//! A worker's settings and their documented defaults, checked when the worker is built.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::name::Name;
use crate::retry::RetryPolicy;

/// When a worker stops on its own. The library's default is [`Mode::Forever`], what a worker embedded
/// in a service wants; `jobq worker` defaults to [`Mode::Drain`] (`--forever` to poll), for cron.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Return once nothing due is left (cron mode).
    Drain,
    /// Poll until shut down.
    #[default]
    Forever,
}

/// Worker settings. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Queues to claim from, in order: a claim fills up from the first queue before it looks at the next.
    pub queues: Vec<String>,
    /// Jobs run at once.
    pub concurrency: u32,
    /// Most rows taken by one claim (never more than the free slots).
    pub batch_size: u32,
    /// Drain or forever.
    pub mode: Mode,
    /// Longest wait between polls when idle.
    pub poll_interval: Duration,
    /// Time running jobs get to finish after shutdown is requested.
    pub shutdown_grace: Duration,
    /// Run-time limit for jobs that set none and whose handler sets none.
    pub default_timeout: Duration,
    /// Time a handler gets to return after it is told to stop (timeout or hard shutdown) before its
    /// task is dropped.
    pub cancel_grace: Duration,
    /// How often the worker refreshes its registry row.
    pub heartbeat_interval: Duration,
    /// The self-fence bound: a worker that cannot write its heartbeat for this long stops its running
    /// jobs (its command handlers are killed), and reapers wait this long plus a 2 s margin before
    /// they reset its rows on a lost session, so a job never runs twice at once. At least three
    /// heartbeat intervals.
    pub fence_after: Duration,
    /// Retry backoff.
    pub retry: RetryPolicy,
}

impl WorkerConfig {
    /// Default `concurrency`: 10.
    pub const DEFAULT_CONCURRENCY: u32 = 10;
    /// Most jobs one worker process may run at once (`worker.concurrency`, `--concurrency`): 10,000.
    ///
    /// A worker's pool is sized `concurrency + 2` connections, and the driver allocates its queue of idle
    /// connections for that many up front: `--concurrency 4000000000` asked for about 192 GB and the
    /// process aborted. Nothing useful lies near such values either: every running SQL handler holds a
    /// connection (MariaDB allows 151 by default), every running command is a process, and the best
    /// drain `jobq bench` found used 2,000. Past 10,000 jobs at once, run more worker processes.
    pub const MAX_CONCURRENCY: u32 = 10_000;
    /// Default `batch_size`: 10.
    pub const DEFAULT_BATCH_SIZE: u32 = 10;
    /// Default `poll_interval`: 2 s. An idle worker sends one statement per interval, a server-side wait
    /// that probes for due jobs every 100 ms, so an INSERT into an idle queue still starts within about
    /// 100 ms (within the interval only where that wait cannot be used).
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(2);
    /// The first idle wait; it doubles up to `poll_interval`.
    pub const DEFAULT_MIN_POLL: Duration = Duration::from_millis(20);
    /// Default `shutdown_grace`: 30 s.
    pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
    /// Default `default_timeout`: 30 min.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
    /// Default `cancel_grace`: 10 s (a command gets SIGTERM, then SIGKILL after 5 s).
    pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(10);
    /// Default `heartbeat_interval`: 2 s, so that five beats fit in the default fence bound and a
    /// worker whose session dropped has re-registered long before it would have to stop its jobs.
    pub const DEFAULT_HEARTBEAT: Duration = crate::db::registry::DEFAULT_HEARTBEAT;
    /// Default `fence_after`: 10 s, five default heartbeats. A worker rides out a database outage or
    /// network cut shorter than this without stopping its jobs.
    pub const DEFAULT_FENCE_AFTER: Duration = crate::claimant::fence::DEFAULT_BOUND;

    /// The connections a worker's pool needs: one per job, since SQL handlers hold a pooled connection
    /// while they run, and two for the heartbeat's helpers, the cancel watcher and failure finishes.
    /// The claim loop and the finisher hold connections of their own, outside the pool.
    pub fn pool_size(&self) -> u32 {
        self.concurrency + 2
    }

    pub(super) fn validate(&self) -> Result<()> {
        if self.queues.is_empty() {
            return Err(Error::invalid("worker queues", "name at least one queue"));
        }
        for q in &self.queues {
            Name::Queue.check(q)?;
        }
        if self.concurrency == 0 || self.batch_size == 0 {
            return Err(Error::invalid(
                "worker concurrency or batch size",
                "must be at least 1",
            ));
        }
        if self.concurrency > Self::MAX_CONCURRENCY {
            return Err(Error::invalid(
                "worker concurrency",
                format!(
                    "{} is above the maximum of {} jobs per worker process; run more worker \
                     processes instead",
                    self.concurrency,
                    Self::MAX_CONCURRENCY
                ),
            ));
        }
        if self.poll_interval.is_zero() || self.heartbeat_interval.is_zero() {
            return Err(Error::invalid(
                "worker poll or heartbeat interval",
                "must be above zero",
            ));
        }
        if self.fence_after < self.heartbeat_interval * 3 {
            return Err(Error::invalid(
                "worker fence_after",
                format!(
                    "{} must be at least three heartbeat intervals ({}): a single slow heartbeat \
                     would otherwise stop every running job",
                    humantime::format_duration(self.fence_after),
                    humantime::format_duration(self.heartbeat_interval * 3)
                ),
            ));
        }
        Ok(())
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            queues: vec!["default".into()],
            concurrency: Self::DEFAULT_CONCURRENCY,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            mode: Mode::default(),
            poll_interval: Self::DEFAULT_POLL_INTERVAL,
            shutdown_grace: Self::DEFAULT_SHUTDOWN_GRACE,
            default_timeout: Self::DEFAULT_TIMEOUT,
            cancel_grace: Self::DEFAULT_CANCEL_GRACE,
            heartbeat_interval: Self::DEFAULT_HEARTBEAT,
            fence_after: Self::DEFAULT_FENCE_AFTER,
            retry: RetryPolicy::default(),
        }
    }
}
