//! The reaper: finds claimants that are gone and makes their rows runnable again; cleans the process
//! registry; prunes finished jobs past their retention.
//!
//! Any number of reapers may run at once (one per host is normal): every reset is fenced on the claim
//! token, so a row is reset once however many reapers see it, and a claimant's late finish cannot
//! overwrite a reset (nor a reset a finish).
//!
//! How a claimant is judged is in [`crate::claimant::liveness`]. A reaper on the claimant's host sees its process
//! die and resets its rows on the next pass (within one interval, 2 s by default). Elsewhere the
//! claimant's anchor session ends with the process, but a lost session alone is not enough: the reaper
//! waits until the claimant's heartbeat is older than its self-fence bound plus
//! [`crate::claimant::fence::MARGIN`] (10 s + 2 s by default), by which time a claimant that is alive but cut off
//! has stopped its jobs itself. A SIGKILLed worker on another host is thus rescued within about 12 s
//! plus one interval of its last heartbeat.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::claimant::liveness::{self, Facts, Registered, Thresholds, Verdict};
use crate::claimant::token::{ClaimToken, ProcessIdentity};
use crate::db::reap::{self, RegistryRow};
use crate::db::registry::Role;
use crate::error::{Error, Result};
use crate::service::{Register, run_every};
use crate::session::lock_name;

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

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Claimants judged dead.
    pub dead_claimants: u64,
    /// Rows made runnable again.
    pub requeued: u64,
    /// Rows that ended dead (their attempts were used up) or cancelled.
    pub ended: u64,
    /// Registry rows removed.
    pub forgotten: u64,
    /// Finished jobs pruned.
    pub pruned: u64,
    /// Groups of due jobs (queue and kind) that waited past `unserved_after` with no live worker to
    /// claim them; each is logged as a warning.
    pub unserved: u64,
    /// Waiting jobs whose dependencies were all done: queued now.
    pub released_waiting: u64,
    /// Waiting jobs cancelled because a job they waited for ended dead or cancelled.
    pub cancelled_waiting: u64,
}

crate::counts::counters!(ReapReport {
    dead_claimants,
    requeued,
    ended,
    forgotten,
    pruned,
    unserved,
    released_waiting,
    cancelled_waiting
});

impl crate::service::PassReport for ReapReport {
    fn is_quiet(&self) -> bool {
        *self == ReapReport::default()
    }
}

/// The reaper service.
#[derive(Debug)]
pub struct Reaper {
    pool: MySqlPool,
    cfg: ReaperConfig,
    /// The chores a pass does less often than it runs: pruning, the unserved-work survey, the gauges.
    prune: Every,
    survey: Every,
    gauges: Every,
}

/// How often a reaper reads the queue gauges (`jobq_queue_*`, `jobq_processes`) from the database.
const GAUGES_EVERY: Duration = Duration::from_secs(15);

/// Takes a gone claimant's rows back (see [`reap::reset_claim`]), logs each one, and removes the
/// claimant's registry row. The one way rows of a dead claimant are released, by the reaper and by a
/// supervisor whose child died. `by` names who did it, for the logs and `last_error`.
pub(crate) async fn release_claimant(
    pool: &MySqlPool,
    token: &str,
    reason: &str,
    by: &str,
    cause: &'static str,
) -> Result<Vec<reap::ResetJob>> {
    let why = format!("claimant {token} died ({reason}); released by its {by}; its attempt counts");
    let jobs = reap::reset_claim(pool, token, &why).await?;
    for job in &jobs {
        warn!(job_id = job.id, kind = %job.kind, claim = %token, now = %job.state, %reason, by,
              "released a dead claimant's job");
    }
    reap::forget(pool, token).await?;
    let requeued = jobs.iter().filter(|j| j.state == "queued").count() as u64;
    crate::telemetry::released(by, cause, requeued, jobs.len() as u64 - requeued);
    Ok(jobs)
}

impl Reaper {
    /// A reaper on `pool`.
    ///
    /// # Errors
    /// When the settings are out of range (see [`ReaperConfig::validate`]).
    pub fn new(pool: MySqlPool, cfg: ReaperConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            pool,
            cfg,
            prune: Every::default(),
            survey: Every::default(),
            gauges: Every::default(),
        })
    }

    /// Runs passes every `interval` until `shutdown` is cancelled; a pass in progress always finishes.
    /// Registers as a reaper for as long as it runs, waiting for the database if it is not there yet.
    ///
    /// # Errors
    /// When the database is not migrated or refuses the login.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let register = Register::service(Role::Reaper);
        let Some(registration) = register.open(&self.pool, &shutdown).await? else {
            return Ok(());
        };
        info!(interval = ?self.cfg.interval, lease = ?self.cfg.lease, "reaper started");
        match reap::galera_cluster_size(&self.pool).await {
            Ok(Some(nodes)) => info!(
                nodes,
                "Galera cluster: locks, sessions and connection ids are this node's own, so the \
                 processlist is not trusted and claimants are judged by their replicated heartbeats and \
                 fence bounds (and on this host by their pid)"
            ),
            Ok(None) => {}
            Err(e) => debug!(error = %e, "could not tell whether the server is a Galera node"),
        }
        run_every("reaper", self.cfg.interval, &shutdown, || self.run_once()).await;
        registration.close(&self.pool).await;
        info!("reaper stopped");
        Ok(())
    }

    /// One pass: judge every claimant and registered process, reset the dead ones' rows, forget them,
    /// and prune if it is time.
    ///
    /// # Errors
    /// When a statement fails; the next pass tries again.
    pub async fn run_once(&self) -> Result<ReapReport> {
        let mut report = ReapReport::default();
        let dead = self.find_dead().await?;
        for (token, cause, reason) in dead {
            report.dead_claimants += 1;
            for job in
                release_claimant(&self.pool, &token, &reason, "reaper", cause.label()).await?
            {
                if job.state == "queued" {
                    report.requeued += 1;
                } else {
                    report.ended += 1;
                }
            }
            report.forgotten += 1;
        }
        let swept = crate::db::deps::sweep(&self.pool).await?;
        report.released_waiting = swept.released;
        report.cancelled_waiting = swept.cancelled;
        let prune_due = self.cfg.retention.is_some() && self.prune.due(self.cfg.prune_every);
        if let Some(retention) = self.cfg.retention.filter(|_| prune_due) {
            report.pruned = crate::db::prune::prune_finished(&self.pool, retention).await?;
            crate::telemetry::pruned(report.pruned);
        }
        if self.survey.due(self.cfg.prune_every) {
            report.unserved = self.warn_unserved().await?;
        }
        // The gauges are figures for a dashboard: failing to read them must not hold up the releases
        // and pruning above, nor be reported as a failed pass.
        if self.cfg.database_gauges
            && self.gauges.due(GAUGES_EVERY)
            && let Err(e) = self.read_gauges().await
        {
            warn!(error = %e, retry_in = ?GAUGES_EVERY, "could not read the database gauges");
        }
        Ok(report)
    }

    /// Reads the queue gauges every process would otherwise read for itself: due jobs and the oldest
    /// one's wait per queue, waiting and running jobs per queue (walks over waiting and running rows
    /// only), jobs per state (each counted up to 100,000), jobs per queue and state (each state's rows
    /// counted up to 10,000), processes per role, schedules per state, the longest-running job, the
    /// jobs waiting for others longer than `long_wait`, and InnoDB's history list length when this
    /// user may read it.
    async fn read_gauges(&self) -> Result<()> {
        use crate::db::admin;
        let (
            lag,
            queues,
            paused,
            processes,
            states,
            by_queue,
            schedules,
            oldest_running,
            long_waiting,
        ) = tokio::try_join!(
            admin::lag(&self.pool),
            admin::queue_summaries(&self.pool),
            crate::db::queues::paused(&self.pool),
            admin::processes(&self.pool),
            admin::state_counts(&self.pool),
            crate::db::gauges::queue_state_counts(&self.pool),
            admin::schedules_by_state(&self.pool),
            admin::oldest_running_secs(&self.pool),
            crate::db::deps::long_waiting(&self.pool, self.cfg.long_wait),
        )?;
        let mut roles: std::collections::BTreeMap<String, i64> = Default::default();
        for p in &processes {
            *roles.entry(p.role.clone()).or_default() += 1;
        }
        let held = self.held(&paused, &processes).await?;
        let gauges = crate::telemetry::DbGauges {
            held,
            due: lag
                .into_iter()
                .map(|l| (l.queue, l.due, l.oldest_due_secs))
                .collect(),
            queues: queues
                .into_iter()
                .map(|q| (q.queue, q.waiting, q.running))
                .collect(),
            paused: paused.into_iter().map(|p| p.name).collect(),
            processes: roles.into_iter().collect(),
            states: states
                .into_iter()
                .map(|s| (s.state.as_str(), s.count))
                .collect(),
            queue_states: by_queue
                .into_iter()
                .map(|c| (c.queue, c.state.as_str(), c.count))
                .collect(),
            schedules,
            oldest_running_secs: oldest_running,
            waiting_long: long_waiting.count,
            history_length: admin::history_length(&self.pool).await,
        };
        crate::telemetry::db_gauges(&gauges);
        Ok(())
    }

    /// Due jobs held back per queue and reason (a pause, a pin, a full or zero limit): the
    /// `jobq_queue_held_jobs` gauge. Reads the due rows by kind, the pins, the limits and the running
    /// rows: each a short range, none of the history.
    async fn held(
        &self,
        paused: &[crate::db::queues::PausedQueue],
        processes: &[crate::db::admin::ProcessRow],
    ) -> Result<Vec<(String, &'static str, i64)>> {
        use crate::db::admin;
        let (due, pins, limits, running) = tokio::try_join!(
            admin::due_by_kind(&self.pool),
            crate::db::queues::pins(&self.pool),
            crate::db::limits::all(&self.pool),
            admin::running_counts(&self.pool),
        )?;
        let groups = admin::held(&admin::HoldFacts {
            due: &due,
            paused,
            pins: &pins,
            processes,
            limits: &limits,
            running: &running,
        });
        let mut sums: std::collections::BTreeMap<(String, &'static str), i64> = Default::default();
        for g in groups {
            for h in &g.holds {
                *sums.entry((g.queue.clone(), h.label())).or_default() += g.due;
            }
        }
        Ok(sums.into_iter().map(|((q, r), n)| (q, r, n)).collect())
    }

    /// Warns about due jobs that have waited past `unserved_after` and that no live worker will
    /// claim. Returns how many groups it warned about.
    async fn warn_unserved(&self) -> Result<u64> {
        use crate::db::admin::{self, Unserved};
        let due = admin::due_by_kind(&self.pool).await?;
        let waited: Vec<admin::KindLag> = due
            .into_iter()
            .filter(|k| k.oldest_due_secs >= self.cfg.unserved_after.as_secs_f64())
            .collect();
        if waited.is_empty() {
            return Ok(0);
        }
        let processes = admin::processes(&self.pool).await?;
        let unserved = admin::unserved(&waited, &processes);
        for (k, why) in &unserved {
            let why = match why {
                Unserved::InvalidKind => {
                    "its kind is not a valid kind name (workers match kinds exactly)"
                }
                Unserved::NoWorkerOnQueue => "no live worker claims from its queue",
                Unserved::NoHandler => "no live worker on its queue has a handler for its kind",
            };
            warn!(queue = %k.queue, kind = ?k.kind, due = k.due, oldest_due_secs = k.oldest_due_secs.round(),
                  "due jobs are waiting that no live worker will claim: {why}");
        }
        Ok(unserved.len() as u64)
    }

    /// Claimants judged dead, with the reason.
    async fn find_dead(&self) -> Result<Vec<(String, crate::claimant::liveness::Cause, String)>> {
        let verdicts = self.judge_all().await?;
        Ok(verdicts
            .into_iter()
            .filter_map(|(t, v)| match v {
                Verdict::Dead(cause, r) => Some((t, cause, r)),
                Verdict::Suspect(r) => {
                    debug!(claim = %t, reason = %r, "claimant suspect; waiting out its fence");
                    None
                }
                Verdict::Alive => None,
            })
            .collect())
    }

    /// Verdicts on every claimant of a running row and every registered process but this one.
    async fn judge_all(&self) -> Result<HashMap<String, Verdict>> {
        let registry: HashMap<String, RegistryRow> = reap::registry(&self.pool)
            .await?
            .into_iter()
            .map(|r| (r.token.clone(), r))
            .collect();
        let claims = reap::running_claims(&self.pool).await?;
        let newest_claim: HashMap<String, Duration> =
            claims.iter().map(|(t, _, age)| (t.clone(), *age)).collect();
        let mut tokens: Vec<String> = claims.into_iter().map(|(t, _, _)| t).collect();
        for t in registry.keys() {
            if !tokens.contains(t) {
                tokens.push(t.clone());
            }
        }
        if tokens.is_empty() {
            return Ok(HashMap::new());
        }
        let (server_id, epoch, uptime) = reap::server_state(&self.pool).await?;
        // On a Galera node the processlist and connection ids are this node's own (every node of the
        // test cluster has server_id 1 and the same start time, give or take), so a listed connection
        // id says nothing about a claimant connected to another node: only the lock (named by the
        // claimant's nonce) and the replicated heartbeat are trusted there.
        let galera = reap::galera_cluster_size(&self.pool).await?.is_some();
        let parsed: Vec<Option<ClaimToken>> = tokens.iter().map(|t| t.parse().ok()).collect();
        let lock_names: Vec<String> = parsed
            .iter()
            .map(|p| p.as_ref().map(lock_name).unwrap_or_default())
            .collect();
        let held = reap::locks_held(&self.pool, &lock_names).await?;
        let conn_ids: Vec<u64> = registry.values().map(|r| r.connection_id).collect();
        let listed = reap::listed_connections(&self.pool, &conn_ids).await?;
        let me = ProcessIdentity::current();
        let thresholds = Thresholds {
            lease: self.cfg.lease,
            session_signals: self.cfg.session_signals,
            restart_grace: self.cfg.restart_grace,
        };

        let mut out = HashMap::new();
        for (i, token) in tokens.iter().enumerate() {
            let reg = registry.get(token);
            let same_server = !galera
                && reg.is_some_and(|r| {
                    r.server_id == server_id && (r.server_epoch - epoch).abs() <= 2
                });
            let process = reg
                .filter(|r| !r.host_id.is_empty() && r.host_id == me.host_id)
                .map(|r| liveness::local_process(r.pid, Some(r.started_at)));
            // This reaper's own row is alive by definition.
            if reg.is_some_and(|r| r.host_id == me.host_id && r.pid == me.pid) {
                continue;
            }
            let facts = Facts {
                registered: reg.map(|r| Registered {
                    heartbeat_age: r.heartbeat_age,
                    heartbeat_every: r.heartbeat_every,
                    fence: r.fence,
                }),
                lock_held: !lock_names[i].is_empty() && held[i],
                connection_listed: reg.is_some_and(|r| listed.contains(&r.connection_id)),
                same_server,
                process,
                server_uptime: uptime,
                newest_claim_age: newest_claim.get(token).copied(),
            };
            out.insert(token.clone(), liveness::judge(&facts, &thresholds));
        }
        Ok(out)
    }
}

/// A chore done at most once per period, on the passes that find it due: the first pass does it.
#[derive(Debug, Default)]
struct Every {
    last: std::sync::Mutex<Option<Instant>>,
}

impl Every {
    /// True when `period` has passed since the last time this said true (or it never did), and
    /// then counts from now.
    fn due(&self, period: Duration) -> bool {
        let mut last = crate::sync::lock(&self.last);
        let due = last.is_none_or(|t| t.elapsed() >= period);
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chore_is_due_on_the_first_pass_then_once_per_period() {
        let hourly = Every::default();
        assert!(hourly.due(Duration::from_secs(3600)));
        assert!(!hourly.due(Duration::from_secs(3600)));
        let always = Every::default();
        assert!(always.due(Duration::ZERO) && always.due(Duration::ZERO));
    }
}
