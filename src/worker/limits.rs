//! Global concurrency limits as one worker sees them: the limits it read last (at most once a second,
//! and only when it claims), how a claim of one queue splits under them, and which limits were full at
//! the last claim, so an idle worker does not wait for work that a full limit holds back.

use std::time::{Duration, Instant};

use tracing::debug;

use crate::db::dedicated::Dedicated;
use crate::db::limits::{self, Limit, LimitKey, LimitScope};

/// How old the limits a worker claims under may be: a new or changed limit holds within this.
pub(crate) const READ_EVERY: Duration = Duration::from_secs(1);

/// How often an idle worker held back by a full limit looks (read-only) whether it has room again: the
/// longest a freed place waits for this worker.
pub(super) const HELD_RECHECK: Duration = Duration::from_millis(500);

/// One part of a claim: these kinds, under these limits (none: the plain claim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Part {
    pub(super) kinds: Vec<String>,
    pub(super) limits: Vec<LimitKey>,
}

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

    /// How a claim of `kinds` in `queue` splits: see [`plan`].
    pub(super) fn plan(&self, queue: &str, kinds: &[String]) -> Vec<Part> {
        plan(&self.all, queue, kinds)
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

/// How a claim of `kinds` in `queue` splits under `all` limits: with none that applies, one plain part
/// (the claim is what it always was); otherwise the unlimited kinds together under the queue's limit (if
/// any), and each limited kind alone under its own limit and the queue's.
pub(super) fn plan(all: &[Limit], queue: &str, kinds: &[String]) -> Vec<Part> {
    let queue_limits: Vec<LimitKey> = all
        .iter()
        .filter(|l| l.scope == LimitScope::Queue && l.name == queue)
        .map(Limit::key)
        .collect();
    let kind_limits = |k: &String| -> Vec<LimitKey> {
        all.iter()
            .filter(|l| l.scope == LimitScope::Kind && &l.name == k)
            .map(Limit::key)
            .collect()
    };
    let (limited_kinds, free): (Vec<String>, Vec<String>) = kinds
        .iter()
        .cloned()
        .partition(|k| !kind_limits(k).is_empty());
    let mut parts = Vec::new();
    if !free.is_empty() {
        parts.push(Part {
            kinds: free,
            limits: queue_limits.clone(),
        });
    }
    for k in limited_kinds {
        let mut limits = queue_limits.clone();
        limits.extend(kind_limits(&k));
        parts.push(Part {
            kinds: vec![k],
            limits,
        });
    }
    parts
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
    fn without_a_limit_that_applies_the_claim_is_one_plain_part() {
        let all = vec![
            limit(LimitScope::Kind, "other"),
            limit(LimitScope::Queue, "q2"),
        ];
        assert_eq!(
            plan(&all, "q", &strings(&["a", "b"])),
            [Part {
                kinds: strings(&["a", "b"]),
                limits: vec![]
            }]
        );
    }

    #[test]
    fn limited_kinds_are_claimed_alone_under_their_limits_and_the_queues() {
        let mut rate = limit(LimitScope::Kind, "b");
        rate.per = Some(Duration::from_secs(60));
        let all = vec![
            limit(LimitScope::Kind, "b"),
            rate,
            limit(LimitScope::Queue, "q"),
        ];
        let q = key(LimitScope::Queue, "q", 0);
        assert_eq!(
            plan(&all, "q", &strings(&["a", "b", "c"])),
            [
                Part {
                    kinds: strings(&["a", "c"]),
                    limits: vec![q.clone()]
                },
                Part {
                    kinds: strings(&["b"]),
                    limits: vec![
                        q,
                        key(LimitScope::Kind, "b", 0),
                        key(LimitScope::Kind, "b", 60)
                    ]
                }
            ]
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
