//! [`Jobs::last_hour`](super::jobs::Jobs::last_hour)'s counts, kept between calls (the dashboard's
//! overview asks on every view): a minute that has passed does not change, so
//! after the first view only the last two minutes are counted again. Done jobs come from the workers'
//! counts (a row per process and minute), dead ones from their rows: in a burst of failures the hour
//! can be hundreds of thousands of index entries, two minutes a thirtieth of that.

use std::sync::Arc;

use sqlx::MySqlPool;
use tokio::sync::Mutex;

use crate::db::admin::{self, MinuteCount};
use crate::error::Result;
use crate::job::State;

/// Minutes before this one (minutes since the epoch, database clock) are final; the counts of those
/// still inside the hour are kept.
#[derive(Debug, Default)]
struct Kept {
    final_before: Option<i64>,
    counts: Vec<(i64, State, i64)>,
}

/// See the module docs. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct MinuteCache {
    kept: Arc<Mutex<Kept>>,
}

impl MinuteCache {
    /// Done and dead jobs per minute over the last hour.
    pub(crate) async fn last_hour(&self, pool: &MySqlPool) -> Result<Vec<MinuteCount>> {
        // One refresh at a time: concurrent views wait for it instead of counting the hour twice.
        let mut kept = self.kept.lock().await;
        let (now, fresh) = admin::finished_by_minute(pool, kept.final_before).await?;
        let mut counts: Vec<(i64, State, i64)> = match kept.final_before {
            Some(before) => kept
                .counts
                .iter()
                .filter(|(m, _, _)| *m < before && *m > now - 60)
                .copied()
                .collect(),
            None => Vec::new(),
        };
        counts.extend(fresh);
        let minutes = admin::per_minute(now, &counts);
        // A finish committed just after a minute ended carries that minute's time: the last two
        // minutes are counted again next time.
        kept.final_before = Some(now - 1);
        counts.retain(|(m, _, _)| *m < now - 1);
        kept.counts = counts;
        Ok(minutes)
    }
}
