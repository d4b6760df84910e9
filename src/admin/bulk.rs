//! Actions on many jobs at once, for `jobq jobs bulk`, the dashboard's forms and `POST /api/jobs/bulk`:
//! which jobs a filter takes (the rules that keep a typo from taking every job), and doing an action
//! to each, one by one, under one audit entry.

use super::jobs::{JobAction, Jobs};
use crate::db::admin::JobFilter;
use crate::error::Result;
use crate::job::JobId;

/// What [`Jobs::apply_each`] or [`Jobs::apply_matching`] did.
#[derive(Debug)]
pub struct BulkOutcome {
    /// The jobs it was to act on.
    pub matched: usize,
    /// The jobs it changed.
    pub done: u64,
    /// Why each refused job was refused (its state did not allow the action, say), in order.
    pub refused: Vec<String>,
    /// The database error that stopped it before the end, if one did: the jobs after it were not
    /// tried (a lost connection would fail each of them anyway).
    pub stopped: Option<crate::Error>,
}

impl Jobs {
    /// The ids a bulk action over `filter` acts on, newest first: every matching job, or an error
    /// when they are more than `filter.limit` (nothing is acted on then, rather than an arbitrary
    /// part). A filter that names nothing matches every job, so it is taken only with `all`; `all`
    /// with a filter is refused as contradictory. This is the one place these rules live: `jobq jobs
    /// bulk`, the dashboard's forms and `POST /api/jobs/bulk` all come through here.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for an empty filter without `all`, `all` with a filter, a `limit` of
    /// 0, or more matching jobs than `limit`; or a failed read.
    pub async fn bulk_ids(&self, filter: &JobFilter, all: bool) -> Result<Vec<JobId>> {
        check_bulk_scope(filter, all)?;
        let mut probe = filter.clone();
        probe.limit = filter.limit.saturating_add(1);
        let ids = self.matching_ids(&probe).await?;
        if ids.len() > filter.limit as usize {
            return Err(crate::Error::invalid(
                "bulk action",
                format!(
                    "more than {} jobs match {}; narrow the filter or raise the limit",
                    filter.limit,
                    filter.describe()
                ),
            ));
        }
        Ok(ids)
    }

    /// Does `action` to each of `ids`, one by one (the same statement, checks and outcome as
    /// [`Jobs::apply`]), calling `progress(done_or_refused_so_far, total)` after each; one audit entry
    /// names them all.
    pub async fn apply_each(
        &self,
        action: JobAction,
        ids: &[JobId],
        progress: impl FnMut(usize, usize),
    ) -> BulkOutcome {
        let target = ids
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        self.apply_listed(action, ids, &target, progress).await
    }

    /// Does `action` to every job matching `filter` when called (the rules of [`Jobs::bulk_ids`]),
    /// as [`Jobs::apply_each`] does; the audit entry names the filter.
    ///
    /// # Errors
    /// Those of [`Jobs::bulk_ids`]: nothing is changed then.
    pub async fn apply_matching(
        &self,
        action: JobAction,
        filter: &JobFilter,
        all: bool,
        progress: impl FnMut(usize, usize),
    ) -> Result<BulkOutcome> {
        let ids = self.bulk_ids(filter, all).await?;
        let target = if filter.is_unfiltered() {
            "all jobs".to_string()
        } else {
            format!("filter {}", filter.describe())
        };
        Ok(self.apply_listed(action, &ids, &target, progress).await)
    }

    async fn apply_listed(
        &self,
        action: JobAction,
        ids: &[JobId],
        target: &str,
        mut progress: impl FnMut(usize, usize),
    ) -> BulkOutcome {
        // Each job's own entry would bury the one that says what the operator asked for.
        let quiet = Self::new(self.pool.clone());
        let mut out = BulkOutcome {
            matched: ids.len(),
            done: 0,
            refused: Vec::new(),
            stopped: None,
        };
        for (n, id) in ids.iter().enumerate() {
            match quiet.apply(action, *id).await {
                Ok(_) => out.done += 1,
                Err(e @ crate::Error::Db(_)) => {
                    out.stopped = Some(e);
                    break;
                }
                Err(e) => out.refused.push(e.to_string()),
            }
            progress(n + 1, ids.len());
        }
        self.auditor
            .record(
                &self.pool,
                &format!("jobs.{}", action.as_str()),
                target,
                out.done,
            )
            .await;
        out
    }
}

/// The rules of [`Jobs::bulk_ids`] that need no database.
fn check_bulk_scope(filter: &JobFilter, all: bool) -> Result<()> {
    if filter.limit == 0 {
        return Err(crate::Error::invalid(
            "bulk action",
            "a limit of 0 acts on nothing; give at least 1",
        ));
    }
    match (filter.is_unfiltered(), all) {
        (true, false) => Err(crate::Error::invalid(
            "bulk action",
            "the filter names no state, queue, kind or error text, so it would take every job; \
             say \"all\" (CLI: --all) to act on every job",
        )),
        (false, true) => Err(crate::Error::invalid(
            "bulk action",
            format!(
                "\"all\" takes every job, but a filter ({}) was given too; drop one of them",
                filter.describe()
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::State;

    fn filter(state: Option<State>, limit: u32) -> JobFilter {
        JobFilter {
            state,
            limit,
            ..JobFilter::default()
        }
    }

    #[test]
    fn an_empty_filter_takes_every_job_only_when_all_is_said() {
        let e = check_bulk_scope(&filter(None, 10), false).unwrap_err();
        assert!(e.to_string().contains("--all"), "{e}");
        check_bulk_scope(&filter(None, 10), true).unwrap();
        check_bulk_scope(&filter(Some(State::Dead), 10), false).unwrap();
    }

    #[test]
    fn all_with_a_filter_is_contradictory() {
        let e = check_bulk_scope(&filter(Some(State::Dead), 10), true).unwrap_err();
        assert!(e.to_string().contains("state=\"dead\""), "{e}");
    }

    #[test]
    fn a_text_search_alone_is_a_filter_but_paging_is_not() {
        let f = JobFilter {
            error_contains: Some("timeout".into()),
            limit: 5,
            ..JobFilter::default()
        };
        check_bulk_scope(&f, false).unwrap();
        let f = JobFilter {
            before: Some(JobId::from(100)),
            limit: 5,
            ..JobFilter::default()
        };
        assert!(check_bulk_scope(&f, false).is_err());
    }

    #[test]
    fn a_limit_of_zero_is_refused() {
        assert!(check_bulk_scope(&filter(Some(State::Dead), 0), false).is_err());
    }
}
