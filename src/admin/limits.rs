//! Global limits on jobs, across every worker of every host: how many of a kind (or queue) run at once,
//! and how many start per period.

use std::time::Duration;

use sqlx::MySqlPool;

use super::audit::Auditor;
use crate::db::limits::{self, LimitKey};
pub use crate::db::limits::{Limit, LimitScope};
use crate::error::{Error, Result};
use crate::name::Name;

/// Sets, removes and lists limits. Workers read them at most a second old when they claim, and claim a
/// limited kind or queue only as far as its limits leave room: a concurrency limit counts the jobs
/// running everywhere, a rate limit the jobs started within its last period. A limit of 0 holds the kind
/// or queue: nothing more of it starts until the limit is raised or removed; what runs finishes.
#[derive(Debug, Clone)]
pub struct JobLimits {
    pool: MySqlPool,
    auditor: Auditor,
}

impl JobLimits {
    /// The highest limit: more than any fleet of workers runs or starts.
    pub const MAX: u32 = 1_000_000;
    /// The longest rate period: a week.
    pub const MAX_PERIOD: Duration = Duration::from_secs(7 * 24 * 3600);

    /// Limits stored in `pool`'s database.
    pub fn new(pool: MySqlPool) -> Self {
        Self {
            pool,
            auditor: Auditor::default(),
        }
    }

    /// Changes made through the returned value are recorded in the audit trail (`jobq_audit`) as made
    /// by `actor`, as the CLI and the dashboard record theirs. Without it, changes leave no entry.
    pub fn by(mut self, actor: impl Into<String>) -> Self {
        self.auditor = Auditor::new(actor);
        self
    }

    /// At most `max_jobs` jobs of `name` (a kind or a queue, as `scope` says) run at once from now on
    /// (within a second). `by` says who asked.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a name the schema cannot hold or a limit above [`Self::MAX`], with
    /// nothing written; a database error.
    pub async fn set(&self, scope: LimitScope, name: &str, max_jobs: u32, by: &str) -> Result<()> {
        let key = key(scope, name, None)?;
        self.store(&key, max_jobs, by).await
    }

    /// At most `max_jobs` jobs of `name` start in any `per` (a sliding window: no period of that
    /// length, wherever it begins, holds more starts), from now on.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a name the schema cannot hold, a limit above [`Self::MAX`], or a period
    /// that is not whole seconds between 1 s and [`Self::MAX_PERIOD`]; a database error.
    pub async fn set_rate(
        &self,
        scope: LimitScope,
        name: &str,
        max_jobs: u32,
        per: Duration,
        by: &str,
    ) -> Result<()> {
        let key = key(scope, name, Some(per))?;
        self.store(&key, max_jobs, by).await
    }

    async fn store(&self, key: &LimitKey, max_jobs: u32, by: &str) -> Result<()> {
        if max_jobs > Self::MAX {
            return Err(Error::invalid(
                "limit",
                format!("{max_jobs} is more than {}", Self::MAX),
            ));
        }
        let by: String = by.chars().take(255).collect();
        limits::set(&self.pool, key, max_jobs, &by).await?;
        let target = format!("{} to {max_jobs}", described(key));
        self.auditor
            .record(&self.pool, "limit.set", &target, 1)
            .await;
        Ok(())
    }

    /// Removes the limit on `name` (the rate limit over `per`, or with `None` the limit at once);
    /// false when there was none.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a name the schema cannot hold or a bad period; a database error.
    pub async fn remove(
        &self,
        scope: LimitScope,
        name: &str,
        per: Option<Duration>,
    ) -> Result<bool> {
        let key = key(scope, name, per)?;
        let removed = limits::remove(&self.pool, &key).await?;
        self.auditor
            .record(
                &self.pool,
                "limit.remove",
                &described(&key),
                u64::from(removed),
            )
            .await;
        Ok(removed)
    }

    /// Every limit, kinds first.
    ///
    /// # Errors
    /// A database error.
    pub async fn list(&self) -> Result<Vec<Limit>> {
        limits::all(&self.pool).await
    }
}

fn key(scope: LimitScope, name: &str, per: Option<Duration>) -> Result<LimitKey> {
    match scope {
        LimitScope::Kind => Name::Kind.check(name)?,
        LimitScope::Queue => Name::Queue.check(name)?,
    }
    let per_secs = match per {
        None => 0,
        Some(p) if p.subsec_nanos() != 0 || p.is_zero() || p > JobLimits::MAX_PERIOD => {
            return Err(Error::invalid(
                "rate period",
                format!(
                    "{} is not whole seconds between 1s and {}",
                    humantime::format_duration(p),
                    humantime::format_duration(JobLimits::MAX_PERIOD)
                ),
            ));
        }
        Some(p) => p.as_secs() as u32,
    };
    Ok(LimitKey {
        scope,
        name: name.to_string(),
        per_secs,
    })
}

/// A limit as the audit trail names it: `kind resize`, `queue mail per 60s`.
fn described(key: &LimitKey) -> String {
    match key.per_secs {
        0 => format!("{} {}", key.scope.as_str(), key.name),
        per => format!("{} {} per {per}s", key.scope.as_str(), key.name),
    }
}
