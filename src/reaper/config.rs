//! The reaper's settings, their documented defaults, and the checks they pass before a reaper starts.

use std::time::Duration;

use crate::error::{Error, Result};

/// Reaper settings. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ReaperConfig {
    /// Time between passes.
    pub interval: Duration,
    /// A claimant whose heartbeat is older than this is gone, whatever else is true. Must be well above
    /// the workers' heartbeat interval (5 s by default).
    pub lease: Duration,
    /// Whether anchor sessions (`IS_USED_LOCK`, the processlist) count. Turn off when clients reach the
    /// server through a proxy that multiplexes sessions; the lease is then the only signal.
    pub session_signals: bool,
    /// How often the workers heartbeat (their `heartbeat_interval`): the lease must be at least three
    /// of these.
    pub heartbeat_interval: Duration,
    /// For this long after the server started, a missing session proves nothing (all sessions are new).
    pub restart_grace: Duration,
    /// Finished jobs older than this are pruned; `None` turns pruning off.
    pub retention: Option<Duration>,
    /// Pruning, and the look for due jobs no live worker serves, run at most this often.
    pub prune_every: Duration,
    /// Due jobs that waited this long with no live worker to claim them (no worker on their queue, no
    /// handler for their kind, an invalid kind) are reported with a warning.
    pub unserved_after: Duration,
    /// Jobs that have waited for other jobs longer than this are counted by the
    /// `jobq_waiting_long_jobs` gauge (default [`crate::Jobs::DEFAULT_LONG_WAIT`], 1 h).
    pub long_wait: Duration,
    /// Read the database gauges (`jobq_queue_*`, `jobq_jobs`, `jobq_processes`, …) every 15 s. Off by
    /// default: they are a dozen queries that only a metrics exporter reads, so a reaper whose figures
    /// nobody scrapes should not pay for them. `jobq reaper --metrics-addr` turns it on; a program
    /// that installs its own recorder sets it.
    pub database_gauges: bool,
}

impl ReaperConfig {
    /// Default interval: 2 s.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
    /// Default lease: 60 s (twelve missed 5 s heartbeats).
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
    /// Default restart grace: 30 s (six worker heartbeats to reconnect).
    pub const DEFAULT_RESTART_GRACE: Duration = Duration::from_secs(30);
    /// Default prune period: 60 s.
    pub const DEFAULT_PRUNE_EVERY: Duration = Duration::from_secs(60);
    /// Default `unserved_after`: 5 min, long enough for a cron-started worker to come by.
    pub const DEFAULT_UNSERVED_AFTER: Duration = Duration::from_secs(5 * 60);
    /// How long finished jobs are kept before the reaper (or `jobq prune`) deletes them: 7 days.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

    /// Checks the settings: no zero periods, and a lease of at least three heartbeat intervals (a
    /// shorter one would judge live workers dead between two of their heartbeats).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the setting.
    pub fn validate(&self) -> Result<()> {
        let fmt = |d: Duration| humantime::format_duration(d).to_string();
        for (name, d) in [
            ("reaper interval", self.interval),
            ("reaper lease", self.lease),
            ("reaper heartbeat interval", self.heartbeat_interval),
            ("reaper prune period", self.prune_every),
        ] {
            if d.is_zero() {
                return Err(Error::invalid(name, "must be above zero"));
            }
        }
        if self.lease < self.heartbeat_interval * 3 {
            return Err(Error::invalid(
                "reaper lease",
                format!(
                    "{} is shorter than three worker heartbeat intervals ({}): it would judge \
                 live workers dead; use a lease of at least {}",
                    fmt(self.lease),
                    fmt(self.heartbeat_interval),
                    fmt(self.heartbeat_interval * 3)
                ),
            ));
        }
        if let Some(r) = self.retention
            && r.is_zero()
        {
            return Err(Error::invalid(
                "retention",
                "must be above zero (leave it unset to keep finished jobs forever)",
            ));
        }
        Ok(())
    }
}

impl Default for ReaperConfig {
    fn default() -> Self {
        Self {
            interval: Self::DEFAULT_INTERVAL,
            lease: Self::DEFAULT_LEASE,
            session_signals: true,
            heartbeat_interval: crate::worker::WorkerConfig::DEFAULT_HEARTBEAT,
            restart_grace: Self::DEFAULT_RESTART_GRACE,
            retention: Some(Self::DEFAULT_RETENTION),
            prune_every: Self::DEFAULT_PRUNE_EVERY,
            unserved_after: Self::DEFAULT_UNSERVED_AFTER,
            long_wait: crate::Jobs::DEFAULT_LONG_WAIT,
            database_gauges: false,
        }
    }
}
