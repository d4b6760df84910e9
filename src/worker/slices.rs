//! The slice of each queue's due rows a worker on a Galera cluster picks from first.
//!
//! Row locks and `SKIP LOCKED` do not reach across nodes: claimers on different nodes that chase the
//! head of one queue lock the same rows, and when two of their claims commit at once, certification
//! fails one of them, which is retried (`jobq bench --sections cluster`: one queue over three nodes at
//! jobq's defaults, 0.008–0.009 conflicts per job, and three workers did no more than one). So workers
//! cut each queue's due rows into one slice per node that live workers serving that queue are on (the
//! registry's `node` and `queues` columns, schema 33) and pick from their own node's slice first:
//! claims on different nodes then stamp different rows. A worker whose slices have nothing due picks
//! from the whole queues in the same claim, so rows whose node's workers are busy elsewhere or gone
//! are still taken; and one claim every [`OPEN_EVERY`] picks from the whole queues first, so that rows of
//! a kind only some nodes' workers run are never stranded behind a deep backlog of their slice. Strict
//! priority order then holds within a slice, not across them.
//!
//! Away from a cluster (MySQL, MariaDB without Galera) a worker finds that out once and picks from the
//! whole queue.
//!
//! The same read tells a worker how many claimers lock rows of each queue where it does (on its
//! server, or on a cluster its node), itself among them, which is how deep its pick reads
//! ([`CLAIM_PICK_AHEAD`] says why a pick reads ahead): a claim reads one `limit` of the claim index per
//! claimer, up to [`CLAIM_PICK_AHEAD`]. The entries a pick reads cost the server most of what a
//! claim costs it besides the stamp: two worker processes draining 100,000 jobs in 1,000-row claims,
//! six drains of each alternating, took 44.2 µs of the server's CPU per job reading two claims' worth
//! against 48.5 reading four (medians), and drained 35,400 jobs/s against 33,100; four processes did
//! no better with two (27,200 against 28,400 jobs/s). So the count is read every [`READ_EVERY`] on any
//! server (every [`AFTER_CONFLICT`] through a worker's first [`READ_EVERY`]); until it is known a pick
//! reads [`CLAIM_PICK_AHEAD`] claims' worth.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tracing::debug;

use crate::db::claim::Slice;
use crate::db::dedicated::Dedicated;
use crate::db::registry::{self, WorkerNode};
use crate::statements::CLAIM_PICK_AHEAD;

/// How old the slices a worker claims by may be: workers that start or stop on a node change them
/// within this.
const READ_EVERY: Duration = Duration::from_secs(2);

/// How soon after a lock conflict the slices are read again: a conflict says that claimers on another
/// node share this worker's rows (workers that started or stopped since the last read), and at the
/// start of a drain, when workers on every node register at about the same time, the first read may
/// not have seen them all. For the same reason the claimers are counted this often through a worker's
/// first [`READ_EVERY`].
const AFTER_CONFLICT: Duration = Duration::from_millis(200);

/// How often one claim picks from the whole queues first. Such a claim races the other nodes for the
/// head of each queue and often loses a row to them, so it is made by the clock rather than by count:
/// one in 64 claims cost about 0.0016 conflicts per job at 10-row claims, one a second costs a worker
/// of 1,500 jobs/s under 0.001, and a stranded row still waits at most about a second per batch.
pub(super) const OPEN_EVERY: Duration = Duration::from_secs(1);

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Slices {
    /// `Some(false)` once the worker's server turned out not to be a Galera node: nothing more to read.
    on_cluster: Option<bool>,
    /// This worker's slice of each queue that workers on more than one node serve, as last read.
    by_queue: HashMap<String, Slice>,
    /// How many live workers serve each queue where this worker claims (its server, or its node on a
    /// cluster), this one among them, as last read.
    claimers: HashMap<String, u32>,
    read_at: Option<Instant>,
    /// The claim connection's lock conflicts at the last read.
    conflicts_seen: u64,
    /// When the first read was made.
    first_read_at: Option<Instant>,
    /// When a claim last picked from the whole queues first.
    opened_at: Option<Instant>,
}

impl Slices {
    /// Whether this claim picks from this worker's slices first. Reads the slices and the claimers
    /// again when the last read is older than [`READ_EVERY`], or [`AFTER_CONFLICT`] after a lock
    /// conflict or while the worker is starting; a failed read keeps the last ones (slices only spare
    /// conflicts, and stale ones cost a few; a stale count of claimers makes claims shorter or their
    /// picks deeper).
    pub(super) async fn before_claim(&mut self, conn: &mut Dedicated) -> bool {
        let stale = |every| self.read_at.is_none_or(|t| t.elapsed() >= every);
        let conflicted =
            self.on_cluster != Some(false) && conn.lock_conflicts() != self.conflicts_seen;
        // Workers that start together each read before the others have registered.
        let starting = self.first_read_at.is_none_or(|t| t.elapsed() < READ_EVERY);
        if stale(READ_EVERY) || ((conflicted || starting) && stale(AFTER_CONFLICT)) {
            self.conflicts_seen = conn.lock_conflicts();
            self.first_read_at.get_or_insert_with(Instant::now);
            self.read(conn).await;
        }
        if self.on_cluster == Some(false) || self.by_queue.is_empty() {
            return false;
        }
        match self.opened_at {
            Some(t) if t.elapsed() < OPEN_EVERY => true,
            _ => {
                self.opened_at = Some(Instant::now());
                false
            }
        }
    }

    /// How many times its `limit` a claim of `queue` picks: one for each claimer of the queue where
    /// this worker claims, at most [`CLAIM_PICK_AHEAD`], which is also the answer until a read
    /// counted them.
    pub(super) fn ahead(&self, queue: &str) -> u32 {
        match self.claimers.get(queue) {
            Some(&n) if n > 0 => crate::statements::pick_ahead(n),
            _ => CLAIM_PICK_AHEAD,
        }
    }

    /// This worker's slice of `queue`: the whole queue unless workers on other nodes serve it too.
    pub(super) fn of(&self, queue: &str) -> Slice {
        self.by_queue.get(queue).copied().unwrap_or(Slice::WHOLE)
    }

    async fn read(&mut self, conn: &mut Dedicated) {
        let on_cluster = self.on_cluster;
        let read = conn
            .run("nodes", 3, |mut c| async move {
                let r = async {
                    let cluster = match on_cluster {
                        Some(known) => known,
                        None => registry::galera_node(&mut c).await?.is_some(),
                    };
                    if cluster {
                        registry::worker_nodes(&mut c).await.map(Read::Nodes)
                    } else {
                        registry::worker_queues(&mut c).await.map(Read::Queues)
                    }
                }
                .await;
                (c, r)
            })
            .await;
        self.read_at = Some(Instant::now());
        match read {
            Ok(Read::Queues(workers)) => {
                self.on_cluster = Some(false);
                self.claimers = claimers_of(workers.iter().map(Vec::as_slice));
            }
            Ok(Read::Nodes(workers)) => {
                self.on_cluster = Some(true);
                self.by_queue = slices_of(&workers);
                self.claimers = claimers_of(
                    workers
                        .iter()
                        .filter(|w| w.mine)
                        .map(|w| w.queues.as_slice()),
                );
            }
            Err(e) => {
                debug!(error = %e, "could not read which nodes workers are on; keeping the last slices");
            }
        }
    }
}

/// What [`Slices::read`] found: on a cluster, the live workers with their nodes; elsewhere, the
/// queues of each live worker.
enum Read {
    Nodes(Vec<WorkerNode>),
    Queues(Vec<Vec<String>>),
}

/// How many of `workers` (each given by its queues) serve each queue.
fn claimers_of<'a>(workers: impl Iterator<Item = &'a [String]>) -> HashMap<String, u32> {
    let mut n: HashMap<String, u32> = HashMap::new();
    for queues in workers {
        for q in queues {
            *n.entry(q.clone()).or_default() += 1;
        }
    }
    n
}

/// This worker's slice of each queue served by workers on two nodes or more, this worker's among
/// them: the queue's nodes in name order, this node's place among them.
fn slices_of(workers: &[WorkerNode]) -> HashMap<String, Slice> {
    let mut nodes: HashMap<&str, Vec<(&str, bool)>> = HashMap::new();
    for w in workers {
        for q in &w.queues {
            let list = nodes.entry(q.as_str()).or_default();
            if !list.iter().any(|(n, _)| *n == w.node) {
                list.push((w.node.as_str(), w.mine));
            }
        }
    }
    nodes
        .into_iter()
        .filter_map(|(queue, mut list)| {
            list.sort_unstable();
            let index = list.iter().position(|(_, mine)| *mine)?;
            (list.len() > 1).then(|| {
                let slice = Slice {
                    of: list.len() as u32,
                    index: index as u32,
                };
                (queue.to_string(), slice)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(node: &str, queues: &[&str], mine: &str) -> WorkerNode {
        WorkerNode {
            node: node.into(),
            queues: queues.iter().map(|q| q.to_string()).collect(),
            mine: node == mine,
        }
    }

    #[test]
    fn each_node_takes_its_place_in_name_order() {
        let on = |mine| {
            slices_of(&[
                worker("node3", &["q"], mine),
                worker("node1", &["q"], mine),
                worker("node2", &["q"], mine),
                worker("node2", &["q"], mine),
            ])
        };
        assert_eq!(on("node1")["q"], Slice { of: 3, index: 0 });
        assert_eq!(on("node2")["q"], Slice { of: 3, index: 1 });
        assert_eq!(on("node3")["q"], Slice { of: 3, index: 2 });
    }

    #[test]
    fn a_queue_is_cut_among_the_nodes_whose_workers_serve_it() {
        let s = slices_of(&[
            worker("node1", &["a", "b"], "node2"),
            worker("node2", &["b", "c"], "node2"),
            worker("node3", &["b", "c"], "node2"),
        ]);
        assert_eq!(s.get("a"), None);
        assert_eq!(s["b"], Slice { of: 3, index: 1 });
        assert_eq!(s["c"], Slice { of: 2, index: 0 });
    }

    #[test]
    fn one_node_or_an_unlisted_one_takes_the_whole_queue() {
        let mine = slices_of(&[worker("node1", &["q"], "node1")]);
        assert!(mine.is_empty());
        let elsewhere = slices_of(&[
            worker("node1", &["q"], "node3"),
            worker("node2", &["q"], "node3"),
        ]);
        assert!(elsewhere.is_empty());
        let s = Slices::default();
        assert_eq!(s.of("q"), Slice::WHOLE);
    }

    #[test]
    fn a_pick_reads_a_claim_ahead_for_each_claimer_up_to_the_most() {
        let mut s = Slices::default();
        assert_eq!(s.ahead("q"), CLAIM_PICK_AHEAD, "not read yet");
        let q = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let workers = [q(&["q", "r"]), q(&["q"]), q(&["s"])];
        s.claimers = claimers_of(workers.iter().map(Vec::as_slice));
        assert_eq!((s.ahead("q"), s.ahead("r"), s.ahead("s")), (2, 1, 1));
        assert_eq!(s.ahead("t"), CLAIM_PICK_AHEAD, "a queue no worker listed");
        let many = vec![q(&["q"]); 9];
        s.claimers = claimers_of(many.iter().map(Vec::as_slice));
        assert_eq!(s.ahead("q"), CLAIM_PICK_AHEAD);
    }
}
