//! Changing how many workers supervisors keep while they run (`jobq scale`).

use sqlx::MySqlPool;

use super::audit::Auditor;
use crate::claimant::token::sanitize_host;
use crate::db::scale;
use crate::db::scale::ScaleSetting;
use crate::error::{Error, Result};

/// Sets, clears and lists the worker counts supervisors follow. Every supervisor reads its count every
/// two seconds and converges: it starts workers, or asks the highest-numbered ones to drain (their
/// running jobs finish) and does not restart them. A count for a host wins over the count for every
/// host; with neither, a supervisor keeps the count it was started with.
#[derive(Debug, Clone)]
pub struct Scale {
    pool: MySqlPool,
    auditor: Auditor,
}

impl Scale {
    /// The most workers one supervisor is asked to keep.
    pub const MAX_WORKERS: u32 = 1000;

    /// Worker counts stored in `pool`'s database.
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

    /// Asks the supervisors of `host` (every host when `None`) to keep `workers` workers; 0 stops them
    /// all (the supervisors stay up, registered, ready to scale up again). `by` says who asked.
    ///
    /// # Errors
    /// [`Error::Invalid`] for more than [`Scale::MAX_WORKERS`] workers or a host name no token can
    /// carry (the host names supervisors register: ASCII letters, digits, `.`, `-`, `_`, at most 64).
    pub async fn set(&self, host: Option<&str>, workers: u32, by: &str) -> Result<()> {
        if workers > Self::MAX_WORKERS {
            return Err(Error::invalid(
                "worker count",
                format!("{workers} is more than {}", Self::MAX_WORKERS),
            ));
        }
        let host = checked_host(host)?;
        let by: String = by.chars().take(255).collect();
        scale::set(&self.pool, host, workers, &by).await?;
        let target = format!("{} to {workers}", on_host(host));
        self.auditor
            .record(&self.pool, "scale.set", &target, 1)
            .await;
        Ok(())
    }

    /// Forgets stored counts and returns how many: with a `host`, its count only (its supervisors then
    /// follow the count for every host, or their own); with `None`, every stored count, the one for
    /// every host and each host's, so that every supervisor goes back to the count it was started with.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a host name no token can carry; a database error.
    pub async fn reset(&self, host: Option<&str>) -> Result<u64> {
        let gone = match host {
            Some(_) => scale::reset(&self.pool, checked_host(host)?).await?,
            None => scale::reset_all(&self.pool).await?,
        };
        let target = host.map_or("every count".to_string(), |h| on_host(h).to_string());
        self.auditor
            .record(&self.pool, "scale.reset", &target, gone)
            .await;
        Ok(gone)
    }

    /// The stored counts, the one for every host (empty `host`) first.
    ///
    /// # Errors
    /// A database error.
    pub async fn settings(&self) -> Result<Vec<ScaleSetting>> {
        scale::all(&self.pool).await
    }
}

/// `host` as supervisors register it, or '' for every host.
fn checked_host(host: Option<&str>) -> Result<&str> {
    match host {
        None => Ok(""),
        Some(h) if !h.is_empty() && sanitize_host(h) == h => Ok(h),
        Some(h) => Err(Error::invalid(
            "host",
            format!(
                "{h:?} is not a host name as supervisors register it (ASCII letters, digits, \
                 `.`, `-`, `_`, at most 64; `jobq stats` lists them)"
            ),
        )),
    }
}

/// A host as the audit trail names it: '' is every host.
fn on_host(host: &str) -> &str {
    if host.is_empty() { "every host" } else { host }
}
