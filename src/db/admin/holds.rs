//! Why due jobs wait although workers could run them: a paused queue, a queue pinned to hosts where no
//! live worker serves it, a limit that is full or set to 0, supervisors scaled to 0 workers. A pure
//! judgement over facts `jobq stats` gathers (as [`super::unserved`] is), so that `stats` (text and
//! JSON), the dashboard and `/metrics` say the same thing: "due 49, held by limit kind email.send 0/0"
//! rather than a queue that does not move for no reason anyone can see.

use super::stats::{KindLag, ProcessRow, RunningCount, Stats};
use crate::db::limits::{Limit, LimitScope};
use crate::db::queues::{PausedQueue, QueuePin};

/// What holds a group of due jobs back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Hold {
    /// The queue is paused (`jobq queue resume`).
    Paused,
    /// The queue is pinned to these hosts, and no live worker there claims from it.
    PinnedAway {
        /// The hosts it is pinned to.
        hosts: Vec<String>,
    },
    /// A concurrency limit is full, or a limit of 0 holds every job it covers.
    Limit {
        /// What the limit counts.
        scope: LimitScope,
        /// The kind or queue.
        name: String,
        /// Jobs it covers that run now.
        running: i64,
        /// Its maximum.
        max_jobs: u32,
        /// `Some`: a rate (starts per this many seconds) of 0.
        per_secs: Option<u64>,
    },
}

impl Hold {
    /// Its `reason` label on `jobq_queue_held_jobs`: `paused`, `pinned_away`, `limit`.
    pub fn label(&self) -> &'static str {
        match self {
            Hold::Paused => "paused",
            Hold::PinnedAway { .. } => "pinned_away",
            Hold::Limit { .. } => "limit",
        }
    }
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hold::Paused => f.write_str("the queue is paused"),
            Hold::PinnedAway { hosts } => write!(
                f,
                "the queue is pinned to {} and no live worker there claims from it",
                hosts.join(", ")
            ),
            Hold::Limit {
                scope,
                name,
                running,
                max_jobs,
                per_secs: None,
            } => write!(f, "limit {} {name} {running}/{max_jobs}", scope.as_str()),
            Hold::Limit {
                scope,
                name,
                max_jobs,
                per_secs: Some(p),
                ..
            } => write!(f, "limit {} {name} {max_jobs} per {p}s", scope.as_str()),
        }
    }
}

/// A group of due jobs (one queue, one kind) and what holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeldGroup {
    /// The queue.
    pub queue: String,
    /// The kind.
    pub kind: String,
    /// Its due jobs.
    pub due: i64,
    /// Everything that holds it (at least one).
    pub holds: Vec<Hold>,
}

/// The facts [`held`] judges by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    pub(crate) due: &'a [KindLag],
    pub(crate) paused: &'a [PausedQueue],
    pub(crate) pins: &'a [QueuePin],
    pub(crate) processes: &'a [ProcessRow],
    pub(crate) limits: &'a [Limit],
    pub(crate) running: &'a [RunningCount],
}

impl Stats {
    /// The groups of due jobs that a pause, a pin, or a full or zero limit holds back, and what holds
    /// each.
    pub fn held(&self) -> Vec<HeldGroup> {
        held(&Facts {
            due: &self.due_by_kind,
            paused: &self.paused,
            pins: &self.pins,
            processes: &self.processes,
            limits: &self.limits,
            running: &self.running,
        })
    }
}

/// Every group of due jobs that something holds back, with all that holds it.
pub(crate) fn held(f: &Facts<'_>) -> Vec<HeldGroup> {
    f.due
        .iter()
        .filter_map(|g| {
            let mut holds = Vec::new();
            if f.paused.iter().any(|p| p.name == g.queue) {
                holds.push(Hold::Paused);
            }
            let hosts: Vec<String> = f
                .pins
                .iter()
                .filter(|p| p.queue == g.queue)
                .map(|p| p.host.clone())
                .collect();
            let served_on_pins = f.processes.iter().any(|p| {
                p.role == "worker"
                    && hosts.contains(&p.host)
                    && p.queues.split(',').any(|q| q == g.queue)
            });
            if !hosts.is_empty() && !served_on_pins {
                holds.push(Hold::PinnedAway { hosts });
            }
            for l in f.limits {
                let covers = match l.scope {
                    LimitScope::Kind => l.name == g.kind,
                    LimitScope::Queue => l.name == g.queue,
                };
                if !covers {
                    continue;
                }
                let running: i64 = f
                    .running
                    .iter()
                    .filter(|r| match l.scope {
                        LimitScope::Kind => r.kind == l.name,
                        LimitScope::Queue => r.queue == l.name,
                    })
                    .map(|r| r.running)
                    .sum();
                let full = match l.per {
                    None => running >= i64::from(l.max_jobs),
                    Some(_) => l.max_jobs == 0,
                };
                if full {
                    holds.push(Hold::Limit {
                        scope: l.scope,
                        name: l.name.clone(),
                        running,
                        max_jobs: l.max_jobs,
                        per_secs: l.per.map(|p| p.as_secs()),
                    });
                }
            }
            (!holds.is_empty()).then(|| HeldGroup {
                queue: g.queue.clone(),
                kind: g.kind.clone(),
                due: g.due,
                holds,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;

    use super::*;

    fn due(queue: &str, kind: &str, n: i64) -> KindLag {
        KindLag {
            queue: queue.into(),
            kind: kind.into(),
            due: n,
            oldest_due_secs: 1.0,
        }
    }

    fn worker(host: &str, queues: &str) -> ProcessRow {
        ProcessRow {
            token: "t".into(),
            role: "worker".into(),
            host: host.into(),
            pid: 1,
            connection_id: 1,
            queues: queues.into(),
            kinds: None,
            version: "v".into(),
            started_at: Utc::now(),
            heartbeat_at: Utc::now(),
        }
    }

    fn limit(scope: LimitScope, name: &str, max_jobs: u32, per: Option<u64>) -> Limit {
        Limit {
            scope,
            name: name.into(),
            per: per.map(Duration::from_secs),
            max_jobs,
            set_at: Utc::now(),
            set_by: "op".into(),
        }
    }

    fn facts<'a>(
        due: &'a [KindLag],
        processes: &'a [ProcessRow],
        limits: &'a [Limit],
        running: &'a [RunningCount],
    ) -> Facts<'a> {
        Facts {
            due,
            paused: &[],
            pins: &[],
            processes,
            limits,
            running,
        }
    }

    #[test]
    fn a_full_or_zero_limit_holds_the_groups_it_covers_and_no_other() {
        let due = [due("mail", "email.send", 49), due("mail", "digest", 3)];
        let limits = [limit(LimitScope::Kind, "email.send", 0, None)];
        let got = held(&facts(&due, &[], &limits, &[]));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, "email.send");
        assert_eq!(got[0].holds[0].to_string(), "limit kind email.send 0/0");

        let running = [RunningCount {
            queue: "mail".into(),
            kind: "digest".into(),
            running: 2,
        }];
        let limits = [
            limit(LimitScope::Queue, "mail", 2, None),
            limit(LimitScope::Kind, "digest", 5, Some(60)),
        ];
        let got = held(&facts(&due, &[], &limits, &running));
        assert_eq!(got.len(), 2, "the queue's limit is full for every kind");
        assert!(got.iter().all(|g| g.holds.len() == 1), "{got:?}");
        assert_eq!(got[0].holds[0].to_string(), "limit queue mail 2/2");
        // A rate of 0 holds; a rate above 0 is not judged here.
        let limits = [limit(LimitScope::Kind, "digest", 0, Some(60))];
        assert_eq!(
            held(&facts(&due, &[], &limits, &[]))[0].holds[0].to_string(),
            "limit kind digest 0 per 60s"
        );
    }

    #[test]
    fn a_pin_holds_a_queue_only_while_no_live_worker_on_its_hosts_serves_it() {
        let due = [due("gpu", "render", 4)];
        let pins = [QueuePin {
            queue: "gpu".into(),
            host: "gpu-1".into(),
            set_at: Utc::now(),
            set_by: "op".into(),
        }];
        let elsewhere = [worker("cpu-1", "gpu")];
        let f = Facts {
            pins: &pins,
            ..facts(&due, &elsewhere, &[], &[])
        };
        assert_eq!(
            held(&f)[0].holds,
            vec![Hold::PinnedAway {
                hosts: vec!["gpu-1".into()]
            }]
        );
        let there = [worker("gpu-1", "default,gpu")];
        let f = Facts {
            pins: &pins,
            ..facts(&due, &there, &[], &[])
        };
        assert!(held(&f).is_empty());
    }

    #[test]
    fn a_paused_queue_holds_all_its_groups() {
        let due = [due("q", "a", 1), due("q", "b", 2), due("r", "a", 3)];
        let paused = [PausedQueue {
            name: "q".into(),
            paused_at: Utc::now(),
            paused_by: "op".into(),
            reason: None,
        }];
        let f = Facts {
            paused: &paused,
            ..facts(&due, &[], &[], &[])
        };
        let groups = held(&f);
        let got: Vec<(&str, &str)> = groups
            .iter()
            .map(|g| (g.queue.as_str(), g.kind.as_str()))
            .collect();
        assert_eq!(got, [("q", "a"), ("q", "b")]);
    }
}
