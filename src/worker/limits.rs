//! Global limits as one worker sees them: the limits it read last (at most once a second, and only
//! when it claims), which of them apply to a claim of one queue, and which limits were full at the
//! last claim, so an idle worker does not wait for work that a full limit holds back.

use std::time::{Duration, Instant};

use tracing::debug;

use crate::db::dedicated::Dedicated;
use crate::db::limits::{self, Applying, Limit, LimitKey, LimitScope};

/// How old the limits a worker claims under may be: a new or changed limit holds within this.
pub(crate) const READ_EVERY: Duration = Duration::from_secs(1);

/// How often an idle worker held back by a full limit looks (read-only) whether it has room again: the
/// longest a freed place waits for this worker.
pub(super) const HELD_RECHECK: Duration = Duration::from_millis(500);

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Limits {
    all: Vec<Limit>,
    read_at: Option<Instant>,
    /// Limits that were full at the last claim.
    full: Vec<LimitKey>,
}

impl Limits {
    /// Reads the limits again if the last read is older than [`READ_EVERY`]. A failed read keeps the
    /// last ones (the claim that follows will meet the same trouble and report it).
    pub(super) async fn refresh(&mut self, conn: &mut Dedicated) {
        if self.read_at.is_some_and(|t| t.elapsed() < READ_EVERY) {
            return;
        }
        let read = conn
            .run("limits", 3, |mut c| async move {
                let r = limits::all_on(&mut c).await;
                (c, r)
            })
            .await;
        match read {
            Ok(all) => {
                self.all = all;
                self.read_at = Some(Instant::now());
            }
            Err(e) => debug!(error = %e, "could not read the concurrency limits; keeping the last"),
        }
    }

    /// The limits that apply to a claim of `kinds` in `queue` (none: the plain claim).
    pub(super) fn applying(&self, queue: &str, kinds: &[String]) -> Applying {
        Applying::of(&self.all, queue, kinds)
    }

    /// Starts a claim: forgets which limits were full.
    pub(super) fn clear_full(&mut self) {
        self.full.clear();
    }

    /// Notes limits a claim found full.
    pub(super) fn note_full(&mut self, full: Vec<LimitKey>) {
        for f in full {
            if !self.full.contains(&f) {
                self.full.push(f);
            }
        }
    }

    /// The limits that were full at the last claim.
    pub(super) fn full(&self) -> &[LimitKey] {
        &self.full
    }

    /// The queues and kinds worth waiting for: those no full limit holds back.
    pub(super) fn open(&self, queues: &[String], kinds: &[String]) -> (Vec<String>, Vec<String>) {
        let held = |scope: LimitScope, name: &String| {
            self.full
                .iter()
                .any(|k| k.scope == scope && &k.name == name)
        };
        (
            queues
                .iter()
                .filter(|q| !held(LimitScope::Queue, q))
                .cloned()
                .collect(),
            kinds
                .iter()
                .filter(|k| !held(LimitScope::Kind, k))
                .cloned()
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(scope: LimitScope, name: &str) -> Limit {
        Limit {
            scope,
            name: name.into(),
            per: None,
            max_jobs: 1,
            set_at: chrono::Utc::now(),
            set_by: String::new(),
        }
    }

    fn key(scope: LimitScope, name: &str, per_secs: u32) -> LimitKey {
        LimitKey {
            scope,
            name: name.into(),
            per_secs,
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn without_a_limit_that_applies_the_claim_is_plain() {
        let l = Limits {
            all: vec![
                limit(LimitScope::Kind, "other"),
                limit(LimitScope::Queue, "q2"),
            ],
            ..Limits::default()
        };
        assert!(l.applying("q", &strings(&["a", "b"])).is_empty());
    }

    #[test]
    fn the_queues_limits_and_each_limited_kinds_apply() {
        let mut rate = limit(LimitScope::Kind, "b");
        rate.per = Some(Duration::from_secs(60));
        let l = Limits {
            all: vec![
                limit(LimitScope::Kind, "b"),
                rate,
                limit(LimitScope::Queue, "q"),
            ],
            ..Limits::default()
        };
        let q = key(LimitScope::Queue, "q", 0);
        assert_eq!(
            l.applying("q", &strings(&["a", "b", "c"])),
            Applying {
                queue: vec![q.clone()],
                kinds: vec![(
                    "b".into(),
                    vec![
                        key(LimitScope::Kind, "b", 0),
                        key(LimitScope::Kind, "b", 60)
                    ]
                )],
            }
        );
        assert_eq!(
            l.applying("q", &strings(&["b"])).of_kind("b").count(),
            3,
            "a job of b counts against the queue's limit and both of b's"
        );
    }

    #[test]
    fn full_limits_are_left_out_of_the_wait() {
        let mut l = Limits::default();
        l.note_full(vec![key(LimitScope::Kind, "b", 0)]);
        l.note_full(vec![key(LimitScope::Queue, "q2", 60)]);
        let (queues, kinds) = l.open(&strings(&["q", "q2"]), &strings(&["a", "b"]));
        assert_eq!((queues, kinds), (strings(&["q"]), strings(&["a"])));
        l.clear_full();
        assert_eq!(
            l.open(&strings(&["q"]), &strings(&["b"])).1,
            strings(&["b"])
        );
    }
}
