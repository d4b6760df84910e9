//! [`Jobs`]: look at and steer the jobs already in the queue, as `jobq jobs`, `jobq stats` and
//! `jobq prune` do, from an application or an operator's tool. The statements live in `db::admin` and
//! `db::prune`; this is their one public door, as [`crate::Schedules`] is for schedules.

use std::time::Duration;

use sqlx::MySqlPool;

use super::audit::Auditor;
use super::minutes::MinuteCache;
use crate::db::admin::{self, CancelOutcome, JobFilter, Stats};
use crate::error::Result;
use crate::job::{JobId, JobRecord};

/// What can be done to one job, by name: what `jobq jobs bulk` and the dashboard's buttons take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobAction {
    /// [`Jobs::retry`].
    Retry,
    /// [`Jobs::cancel`].
    Cancel,
    /// [`Jobs::run_now`].
    RunNow,
    /// [`Jobs::delete`].
    Delete,
}

impl JobAction {
    /// Its name: `retry`, `cancel`, `run-now`, `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Cancel => "cancel",
            Self::RunNow => "run-now",
            Self::Delete => "delete",
        }
    }
}

impl std::str::FromStr for JobAction {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "retry" => Self::Retry,
            "cancel" => Self::Cancel,
            "run-now" => Self::RunNow,
            "delete" => Self::Delete,
            other => {
                return Err(crate::Error::invalid(
                    "job action",
                    format!("{other:?} is not one of retry, cancel, run-now, delete"),
                ));
            }
        })
    }
}

/// Operations on the jobs of one database. Cheap to clone (it holds the pool).
///
/// ```no_run
/// # async fn demo(pool: sqlx::MySqlPool) -> jobq::Result<()> {
/// let jobs = jobq::Jobs::new(pool);
/// let dead = jobs
///     .list(&jobq::JobFilter { state: Some(jobq::State::Dead), limit: 50, ..Default::default() })
///     .await?;
/// for job in dead {
///     jobs.retry(job.id).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Jobs {
    pub(super) pool: MySqlPool,
    pub(super) auditor: Auditor,
    minutes: MinuteCache,
}

impl Jobs {
    /// Most jobs one bulk action over a filter acts on unless the caller says otherwise (`jobq jobs bulk
    /// --limit`): each is acted on one by one, so a filter matching a whole history is refused, not
    /// started.
    pub const DEFAULT_BULK_LIMIT: u32 = 10_000;

    /// How long a job may wait for other jobs before `jobq stats`, the dashboard and the
    /// `jobq_waiting_long_jobs` gauge count it as waiting long: 1 hour. A dependent normally starts as
    /// soon as its last dependency is done; one that waits an hour is worth a look (a dependency stuck
    /// in retries, or in a queue no worker serves).
    pub const DEFAULT_LONG_WAIT: Duration = Duration::from_secs(3600);

    /// Jobs on `pool`'s database.
    pub fn new(pool: MySqlPool) -> Self {
        Self {
            pool,
            auditor: Auditor::default(),
            minutes: MinuteCache::default(),
        }
    }

    /// Changes made through the returned value are recorded in the audit trail (`jobq_audit`, shown
    /// on the dashboard's audit page) as made by `actor`, as `jobq jobs` and the dashboard record
    /// theirs. Without it, changes leave no entry.
    pub fn by(mut self, actor: impl Into<String>) -> Self {
        self.auditor = Auditor::new(actor);
        self
    }

    /// Leaves `action`'s entry for one job.
    async fn audit_one(&self, action: JobAction, id: JobId) {
        self.auditor
            .record(
                &self.pool,
                &format!("job.{}", action.as_str()),
                &id.to_string(),
                1,
            )
            .await;
    }

    /// The output job `id` left ([`JobContext::output`](crate::JobContext::output), `jobq_output`), as
    /// the JSON text stored; `None` when it left none.
    ///
    /// # Errors
    /// [`crate::Error::JobNotFound`] when there is none.
    pub async fn output(&self, id: impl Into<JobId>) -> Result<Option<String>> {
        crate::db::report::read_output(&self.pool, id.into()).await
    }

    /// One job by id.
    ///
    /// # Errors
    /// [`crate::Error::JobNotFound`] when there is none.
    pub async fn get(&self, id: impl Into<JobId>) -> Result<JobRecord> {
        admin::get_job(&self.pool, id.into()).await
    }

    /// The recorded attempts of job `id` that did not end done, oldest first (a done attempt is the job
    /// row itself: its `started_at` and `finished_at`).
    pub async fn attempts(
        &self,
        id: impl Into<JobId>,
    ) -> Result<Vec<crate::db::attempts::AttemptRecord>> {
        crate::db::attempts::of_job(&self.pool, id.into()).await
    }

    /// The jobs job `id` waits for and the jobs that wait for it, each with its state (pending
    /// dependencies only: once a job no longer waits, its dependencies are forgotten).
    pub async fn dependencies(
        &self,
        id: impl Into<JobId>,
    ) -> Result<crate::db::deps::Dependencies> {
        crate::db::deps::of_job(&self.pool, id.into().0).await
    }

    /// How many jobs have waited for other jobs longer than `over` (see [`Jobs::DEFAULT_LONG_WAIT`]),
    /// and the longest wait.
    pub async fn long_waiting(&self, over: Duration) -> Result<crate::db::deps::LongWaiting> {
        crate::db::deps::long_waiting(&self.pool, over).await
    }

    /// Jobs matching `filter`, newest first.
    pub async fn list(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        admin::list_jobs(&self.pool, filter).await
    }

    /// The ids of the jobs matching `filter` (at most `filter.limit`), newest first.
    pub async fn matching_ids(&self, filter: &JobFilter) -> Result<Vec<JobId>> {
        admin::matching_ids(&self.pool, filter).await
    }

    /// Makes a done, dead, cancelled or retry job runnable now with a fresh attempt budget (the
    /// attempts used so far are noted at the head of `last_error`); a job waiting for other jobs runs
    /// now without waiting for them.
    ///
    /// # Errors
    /// [`crate::Error::JobNotFound`], or [`crate::Error::JobState`] for a queued or running job.
    pub async fn retry(&self, id: impl Into<JobId>) -> Result<()> {
        let id = id.into();
        admin::retry_job(&self.pool, id).await?;
        self.audit_one(JobAction::Retry, id).await;
        Ok(())
    }

    /// Makes a queued job, or one waiting for its retry, due now; its attempts are unchanged. False when
    /// it was already due.
    ///
    /// # Errors
    /// [`crate::Error::JobNotFound`], or [`crate::Error::JobState`] for a running or finished job.
    pub async fn run_now(&self, id: impl Into<JobId>) -> Result<bool> {
        let id = id.into();
        let moved = admin::run_job_now(&self.pool, id).await?;
        if moved {
            self.audit_one(JobAction::RunNow, id).await;
        }
        Ok(moved)
    }

    /// Cancels a job: at once if it has not started (queued, retry or waiting); a running job's worker
    /// is asked to stop it. Jobs waiting for it are cancelled with it.
    ///
    /// # Errors
    /// [`crate::Error::JobNotFound`], or [`crate::Error::JobState`] for a finished job.
    pub async fn cancel(&self, id: impl Into<JobId>) -> Result<CancelOutcome> {
        let id = id.into();
        let outcome = admin::cancel_job(&self.pool, id).await?;
        self.audit_one(JobAction::Cancel, id).await;
        Ok(outcome)
    }

    /// Deletes a job that is not running.
    ///
    /// # Errors
    /// [`crate::Error::JobNotFound`], or [`crate::Error::JobState`] for a running job (cancel it first).
    pub async fn delete(&self, id: impl Into<JobId>) -> Result<()> {
        let id = id.into();
        admin::delete_job(&self.pool, id).await?;
        self.audit_one(JobAction::Delete, id).await;
        Ok(())
    }

    /// Done and dead jobs per minute over the last hour, oldest minute first, every minute present.
    /// The counts of minutes that have passed are kept (in this value and its clones), so that asking
    /// again counts only the last two minutes.
    pub async fn last_hour(&self) -> Result<Vec<crate::db::admin::MinuteCount>> {
        self.minutes.last_hour(&self.pool).await
    }

    /// Jobs per state, each counted up to 100,000 (`capped` past it): cheap however long the history.
    pub async fn state_counts(&self) -> Result<Vec<crate::db::admin::StateCount>> {
        admin::state_counts(&self.pool).await
    }

    /// Waiting, due and running jobs per queue: the cost follows the backlog, not the history.
    pub async fn queue_summaries(&self) -> Result<Vec<crate::db::admin::QueueSummary>> {
        admin::queue_summaries(&self.pool).await
    }

    /// Does `action` to job `id` and says what happened, in words ("job 7 will run again").
    ///
    /// # Errors
    /// Those of the action's own method.
    pub async fn apply(&self, action: JobAction, id: impl Into<JobId>) -> Result<String> {
        let id = id.into();
        Ok(match action {
            JobAction::Retry => {
                self.retry(id).await?;
                format!("job {id} will run again")
            }
            JobAction::Cancel => match self.cancel(id).await? {
                CancelOutcome::Cancelled => format!("job {id} cancelled"),
                CancelOutcome::Requested => {
                    format!("job {id} is running: its worker was asked to stop it")
                }
            },
            JobAction::RunNow => {
                if self.run_now(id).await? {
                    format!("job {id} is due now")
                } else {
                    format!("job {id} was already due")
                }
            }
            JobAction::Delete => {
                self.delete(id).await?;
                format!("job {id} deleted")
            }
        })
    }

    /// The registered processes (workers, reapers, supervisors, schedulers), by role then age: which
    /// hosts run jobq now, and which queues and kinds their workers serve.
    pub async fn processes(&self) -> Result<Vec<crate::db::admin::ProcessRow>> {
        admin::processes(&self.pool).await
    }

    /// Per claimant token, its running jobs and how long ago it made its latest claim: what the
    /// dashboard shows beside each process.
    pub(crate) async fn running_by_claimant(
        &self,
    ) -> Result<Vec<(String, i64, std::time::Duration)>> {
        crate::db::reap::running_claims(&self.pool).await
    }

    /// The latest `limit` entries of the audit log (`jobq_audit`), newest first.
    pub(crate) async fn audit(&self, limit: u32) -> Result<Vec<crate::db::audit::AuditEntry>> {
        crate::db::audit::recent(&self.pool, limit).await
    }

    /// Counts per queue and state, due jobs and their wait, the registered processes, and the jobs
    /// that have waited for others longer than [`Jobs::DEFAULT_LONG_WAIT`].
    pub async fn stats(&self) -> Result<Stats> {
        admin::stats(&self.pool, Self::DEFAULT_LONG_WAIT).await
    }

    /// [`Jobs::stats`], counting the jobs that have waited for others longer than `long_wait`.
    pub async fn stats_waiting_over(&self, long_wait: Duration) -> Result<Stats> {
        admin::stats(&self.pool, long_wait).await
    }

    /// Deletes done, dead and cancelled jobs (and schedule runs) that ended more than `retention` ago,
    /// in small batches. Returns how many jobs were deleted.
    pub async fn prune(&self, retention: Duration) -> Result<u64> {
        let deleted = crate::db::prune::prune_finished(&self.pool, retention).await?;
        self.audit_prune(retention, deleted).await;
        Ok(deleted)
    }

    /// [`Jobs::prune`], adding the jobs deleted to `deleted` batch by batch as they go, so that another
    /// task can show the progress of a long prune.
    pub async fn prune_counting(
        &self,
        retention: Duration,
        deleted: &std::sync::atomic::AtomicU64,
    ) -> Result<u64> {
        let n = crate::db::prune::prune_counting(&self.pool, retention, deleted).await?;
        self.audit_prune(retention, n).await;
        Ok(n)
    }

    async fn audit_prune(&self, retention: Duration, deleted: u64) {
        let target = format!(
            "ended over {} ago",
            crate::duration::human_age(retention.as_secs_f64())
        );
        self.auditor
            .record(&self.pool, "jobs.prune", &target, deleted)
            .await;
    }
}
