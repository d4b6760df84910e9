//! Queue control: pausing and resuming queues, for every worker on every host at once, and pinning them
//! to hosts. Priority aging, the queues' other setting, is in `aging.rs`.

use sqlx::MySqlPool;

use super::audit::Auditor;
use crate::db::queues;
pub use crate::db::queues::{PausedQueue, QueuePin};
use crate::error::{Error, Result};
use crate::name::Name;

/// Pauses, resumes and lists paused queues. A paused queue keeps taking jobs; no worker claims from it
/// until it is resumed (its next claim after the pause already skips it), and jobs that were running
/// finish. Pauses live in the database, so they outlast restarts.
#[derive(Debug, Clone)]
pub struct Queues {
    pub(super) pool: MySqlPool,
    pub(super) auditor: Auditor,
}

/// What [`Queues::pause`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paused {
    /// False when the queue was paused already (its first pause's who and why are kept).
    pub newly: bool,
    /// False when no job was waiting in the queue: pausing a name nobody uses yet is allowed (it holds
    /// back the jobs that come), but may be a typo.
    pub had_waiting_jobs: bool,
}

impl Queues {
    /// Operations on `pool`'s queues.
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

    /// Pauses `queue`, recording `by` (who) and `reason` (why, if given).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a queue name the schema cannot hold or a `by`/`reason` over 255
    /// characters, before anything is written; a database error.
    pub async fn pause(&self, queue: &str, by: &str, reason: Option<&str>) -> Result<Paused> {
        Name::Queue.check(queue)?;
        for (what, text) in [("pause actor", Some(by)), ("pause reason", reason)] {
            if let Some(t) = text
                && t.chars().count() > queues::NOTE_WIDTH
            {
                return Err(Error::invalid(
                    what,
                    format!("is longer than {} characters", queues::NOTE_WIDTH),
                ));
            }
        }
        let had_waiting_jobs = queues::has_waiting(&self.pool, queue).await?;
        let newly = queues::pause(&self.pool, queue, by, reason).await?;
        self.auditor
            .record(&self.pool, "queue.pause", queue, u64::from(newly))
            .await;
        Ok(Paused {
            newly,
            had_waiting_jobs,
        })
    }

    /// Resumes `queue`: workers claim from it again at their next claim. False when it was not paused.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a queue name the schema cannot hold; a database error.
    pub async fn resume(&self, queue: &str) -> Result<bool> {
        Name::Queue.check(queue)?;
        let resumed = queues::resume(&self.pool, queue).await?;
        self.auditor
            .record(&self.pool, "queue.resume", queue, u64::from(resumed))
            .await;
        Ok(resumed)
    }

    /// Pins `queue` to `hosts`: from now on (within a second) only workers on these hosts, and any
    /// pinned there before, claim its jobs. Host names are as supervisors and workers register them
    /// (`jobq stats` lists them).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a queue name or host name the schema or a token cannot hold, or no host;
    /// nothing is written then.
    pub async fn pin(&self, queue: &str, hosts: &[&str], by: &str) -> Result<()> {
        Name::Queue.check(queue)?;
        if hosts.is_empty() {
            return Err(Error::invalid("hosts", "name at least one host"));
        }
        for h in hosts {
            check_host(h)?;
        }
        for h in hosts {
            queues::pin(&self.pool, queue, h, by).await?;
        }
        let target = format!("{queue} to {}", hosts.join(","));
        self.auditor
            .record(&self.pool, "queue.pin", &target, hosts.len() as u64)
            .await;
        Ok(())
    }

    /// Unpins `queue` from `host`, or from every host (`None`): a queue left with no host is served
    /// everywhere again. Returns how many pins went.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad queue or host name; a database error.
    pub async fn unpin(&self, queue: &str, host: Option<&str>) -> Result<u64> {
        Name::Queue.check(queue)?;
        if let Some(h) = host {
            check_host(h)?;
        }
        let gone = queues::unpin(&self.pool, queue, host).await?;
        let target = format!("{queue} from {}", host.unwrap_or("every host"));
        self.auditor
            .record(&self.pool, "queue.unpin", &target, gone)
            .await;
        Ok(gone)
    }

    /// Every pin, by queue.
    ///
    /// # Errors
    /// A database error.
    pub async fn pins(&self) -> Result<Vec<QueuePin>> {
        queues::pins(&self.pool).await
    }

    /// The paused queues, by name.
    ///
    /// # Errors
    /// A database error.
    pub async fn paused(&self) -> Result<Vec<PausedQueue>> {
        queues::paused(&self.pool).await
    }
}

/// A host name as workers register it (the claim token's spelling).
fn check_host(h: &str) -> Result<()> {
    if !h.is_empty() && crate::claimant::token::sanitize_host(h) == h {
        Ok(())
    } else {
        Err(Error::invalid(
            "host",
            format!(
                "{h:?} is not a host name as workers register it (ASCII letters, digits, `.`, `-`, \
                 `_`, at most 64; `jobq stats` lists them)"
            ),
        ))
    }
}
