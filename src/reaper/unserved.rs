//! The warning about due jobs that no live worker will claim (no worker on their queue, no handler for
//! their kind, an invalid kind): otherwise such jobs wait in silence.

use tracing::warn;

use super::Reaper;
use crate::error::Result;

impl Reaper {
    /// Warns about due jobs that have waited past `unserved_after` and that no live worker will
    /// claim. Returns how many groups it warned about.
    pub(super) async fn warn_unserved(&self) -> Result<u64> {
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
}
