//! The audit trail's one writer: a facade named with `by(actor)` leaves an entry in `jobq_audit` for
//! each change it makes, so a change made from the CLI, the dashboard or a program is recorded the
//! same way, by the same code.

use sqlx::MySqlPool;

use crate::db::audit;

/// Who a facade acts for; with nobody named, its changes leave no entry (a program's own routine
/// retries are not an operator's actions).
#[derive(Debug, Clone, Default)]
pub(crate) struct Auditor {
    actor: Option<String>,
}

impl Auditor {
    /// Changes are recorded as made by `actor`.
    pub(crate) fn new(actor: impl Into<String>) -> Self {
        Self {
            actor: Some(actor.into()),
        }
    }

    /// Records that `action` changed `affected` rows of `target`. The change was made already: a
    /// failure to record it is logged, not returned, so that the caller is not told a change it made
    /// failed.
    pub(crate) async fn record(&self, pool: &MySqlPool, action: &str, target: &str, affected: u64) {
        let Some(actor) = &self.actor else { return };
        if let Err(e) = audit::record(pool, actor, action, target, affected).await {
            tracing::error!(error = %e, action, target, "could not write the audit entry");
        }
    }
}
