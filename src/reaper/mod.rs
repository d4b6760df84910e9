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
//!
//! This file holds the service and its pass; its settings are in `config.rs`, the judging of
//! claimants in `judge.rs`, the database gauges in `gauges.rs`, the warning about due jobs nobody will
//! claim in `unserved.rs`, the timer of its less frequent chores in `every.rs`, and priority aging (and
//! why it is the reaper's) in `aging.rs`.

pub(crate) mod aging;
mod config;
mod every;
mod gauges;
mod judge;
mod unserved;

use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::db::reap;
use crate::db::registry::Role;
use crate::error::Result;
use crate::service::{Register, run_every};

pub use config::ReaperConfig;
use every::Every;
use gauges::GAUGES_EVERY;

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
    /// Waiting jobs whose priority aging raised (queues set with `jobq queue age`).
    pub aged: u64,
    /// Running rows the sweep found on no holdings list (stamped by plain SQL, or by a jobq older
    /// than schema 38) and listed, so that their claimants are judged like any other.
    pub unlisted: u64,
}

crate::counts::counters!(ReapReport {
    dead_claimants,
    requeued,
    ended,
    forgotten,
    pruned,
    unserved,
    released_waiting,
    cancelled_waiting,
    aged,
    unlisted
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
    /// Where the aging pass resumes in queues with more priority levels than one pass visits.
    aging: aging::Cursors,
    /// Where the next pass's sweep for running rows on no holdings list resumes.
    sweep: std::sync::Mutex<u64>,
}

/// Takes a gone claimant's rows back (see [`reap::reset_claim`]), logs each one, and removes the
/// claimant's registry row. The one way rows of a dead claimant are released, by the reaper and by a
/// supervisor whose child died. `by` names who did it, for the logs and `last_error`.
///
/// `only_if` is what the verdict rested on ([`reap::ResetIf`]): `None` when the claimant came back
/// before its rows were reset, and nothing was changed.
pub(crate) async fn release_claimant(
    pool: &MySqlPool,
    token: &str,
    reason: &str,
    by: &str,
    cause: &'static str,
    only_if: reap::ResetIf,
) -> Result<Option<Vec<reap::ResetJob>>> {
    let why = format!("claimant {token} died ({reason}); released by its {by}; its attempt counts");
    let Some(jobs) = reap::reset_claim(pool, token, &why, only_if).await? else {
        info!(claim = %token, %reason, by, "a claimant judged gone heartbeat again before its rows were reset; left alone");
        return Ok(None);
    };
    for job in &jobs {
        warn!(job_id = job.id, kind = %job.kind, claim = %token, now = %job.state, %reason, by,
              "released a dead claimant's job");
    }
    reap::forget(pool, token).await?;
    let requeued = jobs.iter().filter(|j| j.state == "queued").count() as u64;
    crate::telemetry::released(by, cause, requeued, jobs.len() as u64 - requeued);
    Ok(Some(jobs))
}

impl Reaper {
    /// One step of the walk for running rows that no holdings list names ([`reap::sweep_unlisted`]),
    /// before the claimants are judged: how many it listed, each logged.
    async fn sweep_unlisted(&self) -> Result<u64> {
        let after = *crate::sync::lock(&self.sweep);
        let swept = reap::sweep_unlisted(&self.pool, after).await?;
        // Only a sweep that went through moves on: a failed one is tried again from the same id.
        *crate::sync::lock(&self.sweep) = swept.next;
        if swept.dropped > 0 {
            debug!(
                rows = swept.dropped,
                "removed holdings lists of claimants no longer registered that name nothing running"
            );
        }
        let mut n = 0;
        for (token, ids) in &swept.listed {
            warn!(claim = %token, rows = ids.len(), ids = ?ids,
                  "running rows under this token were on no holdings list (stamped by plain SQL, or by \
                   a jobq older than schema 38); listed them, so the claimant is judged like any other");
            n += ids.len() as u64;
        }
        Ok(n)
    }

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
            aging: aging::Cursors::default(),
            sweep: std::sync::Mutex::new(0),
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
    /// settle waiting jobs, age the priorities of queues with aging, and prune if it is time.
    ///
    /// # Errors
    /// When a statement fails; the next pass tries again.
    pub async fn run_once(&self) -> Result<ReapReport> {
        let mut report = ReapReport::default();
        // A failed sweep (its transactions are retried on deadlocks already) is logged, not returned:
        // it must not hold up the resets below; the next pass reads the same ids again.
        match self.sweep_unlisted().await {
            Ok(n) => report.unlisted = n,
            Err(e) => {
                warn!(error = %e, "the sweep for running rows on no holdings list failed; trying again next pass")
            }
        }
        let dead = self.find_dead().await?;
        for (token, cause, reason, seen) in dead {
            let only_if = reap::ResetIf::HeartbeatUnchanged(seen);
            let Some(jobs) = release_claimant(
                &self.pool,
                &token,
                &reason,
                "reaper",
                cause.label(),
                only_if,
            )
            .await?
            else {
                continue;
            };
            report.dead_claimants += 1;
            for job in jobs {
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
        // A failed aging pass (its statements are retried on deadlocks already) is logged, not
        // returned: it must not hold up the pruning and survey below; the next pass catches up.
        match aging::pass(&mut *self.pool.acquire().await?, &self.aging).await {
            Ok(n) => report.aged = n,
            Err(e) => warn!(error = %e, "priority aging pass failed; trying again next pass"),
        }
        crate::telemetry::aged(report.aged);
        let prune_due = self.cfg.retention.is_some() && self.prune.due(self.cfg.prune_every);
        if let Some(retention) = self.cfg.retention.filter(|_| prune_due) {
            report.pruned = crate::db::prune::prune_finished(&self.pool, retention).await?;
            crate::telemetry::pruned(report.pruned);
        }
        if self.survey.due(self.cfg.prune_every) {
            report.unserved = self.warn_unserved().await?;
            // Figures for a chart: a failure is logged, and the next survey tries again.
            if let Err(e) = crate::db::done_minutes::forget_old(&self.pool).await {
                warn!(error = %e, "could not remove old counts from jobq_done_minutes");
            }
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
}
