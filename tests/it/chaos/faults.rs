//! The faults a chaos run strikes, one at a time, and which claimants each may cost their copies.

use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

use super::fleet::{Database, Fleet};
use crate::history::At;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL of a worker behind the relay, started again 0.2–2 s later.
    WorkerKilled,
    /// SIGKILL of one of the supervisor's workers (the supervisor starts another).
    ChildKilled,
    /// SIGKILL of the supervisor: its workers get SIGTERM and drain; started again 0.2–2 s later.
    SupervisorKilled,
    ReaperKilled,
    SchedulerKilled,
    /// `KILL CONNECTION` of one session behind the relay, or of all of them.
    SessionsKilled,
    /// The relay cut (or silent) for 1–3 s, well inside the fence.
    ShortCut,
    /// The relay cut (or silent) for 15 s, past the fence and the reaper's margin.
    LongCut,
    /// SIGKILL of the server, started again after 2 s (InnoDB recovers what committed).
    ServerKilled,
    /// On the cluster: SIGKILL of a node, started again after 2 s (it rejoins the cluster).
    NodeKilled,
    /// On the cluster: a node cut off from the other two for 15 s (it leaves the Primary component).
    NodeIsolated,
}

impl Fault {
    const ALL: [Fault; 11] = [
        Fault::WorkerKilled,
        Fault::ChildKilled,
        Fault::SupervisorKilled,
        Fault::ReaperKilled,
        Fault::SchedulerKilled,
        Fault::SessionsKilled,
        Fault::ShortCut,
        Fault::LongCut,
        Fault::ServerKilled,
        Fault::NodeKilled,
        Fault::NodeIsolated,
    ];

    /// The faults of a run on a private server, or on the cluster.
    pub fn kinds(cluster: bool) -> Vec<Fault> {
        let server_only = |f: &Fault| *f == Fault::ServerKilled;
        let cluster_only = |f: &Fault| matches!(f, Fault::NodeKilled | Fault::NodeIsolated);
        Fault::ALL
            .into_iter()
            .filter(|f| {
                if cluster {
                    !server_only(f)
                } else {
                    !cluster_only(f)
                }
            })
            .collect()
    }

    /// How often each is picked against the others.
    fn weight(self) -> u32 {
        match self {
            Fault::WorkerKilled | Fault::ChildKilled | Fault::SessionsKilled => 3,
            Fault::ShortCut => 2,
            _ => 1,
        }
    }

    /// One of `kinds`, by weight.
    pub fn pick(rng: &mut StdRng, kinds: &[Fault]) -> Fault {
        let total: u32 = kinds.iter().map(|f| f.weight()).sum();
        let mut n = rng.random_range(0..total);
        for &f in kinds {
            if n < f.weight() {
                return f;
            }
            n -= f.weight();
        }
        unreachable!()
    }

    pub fn describe(self) -> &'static str {
        match self {
            Fault::WorkerKilled => "worker SIGKILLed",
            Fault::ChildKilled => "supervisor's worker SIGKILLed",
            Fault::SupervisorKilled => "supervisor SIGKILLed",
            Fault::ReaperKilled => "reaper SIGKILLed",
            Fault::SchedulerKilled => "scheduler SIGKILLed",
            Fault::SessionsKilled => "sessions killed (KILL CONNECTION)",
            Fault::ShortCut => "network cut of 1–3 s",
            Fault::LongCut => "network cut of 15 s (past the fence)",
            Fault::ServerKilled => "server SIGKILLed and restarted",
            Fault::NodeKilled => "cluster node SIGKILLed and restarted",
            Fault::NodeIsolated => "cluster node cut off for 15 s",
        }
    }
}

/// A fault as it struck: when, and the worker processes it may have cost copies, until when. A
/// duplicate run is explained by a fault only if its claimant is one of these processes and its copy
/// started by `until` (the process was killed, or the cut healed or the server was back).
#[derive(Debug, Clone)]
pub struct Struck {
    pub fault: Fault,
    pub at: At,
    pub until: At,
    pub victims: Vec<u32>,
}

/// How long a dying process's handler may still write its start: a copy forked just before the
/// kill records it a moment later, before the exec shim takes it down.
const DYING: Duration = Duration::from_secs(1);

async fn pause(rng: &mut StdRng, from_ms: u64, to_ms: u64) {
    tokio::time::sleep(Duration::from_millis(rng.random_range(from_ms..to_ms))).await;
}

/// Strikes `fault` and waits until it is over (the process started again, the cut healed, the
/// server back); None if there was nothing to strike (no supervisor child, no session).
pub async fn strike(fleet: &mut Fleet, fault: Fault, rng: &mut StdRng) -> Option<Struck> {
    let later = |at: At, d: Duration| At::host(at.micros + d.as_micros() as i64);
    match fault {
        Fault::WorkerKilled => {
            let i = rng.random_range(0..fleet.workers.len());
            let pid = fleet.workers[i].pid();
            let at = fleet.workers[i].sigkill().await;
            pause(rng, 200, 2000).await;
            fleet.workers[i].respawn();
            Some(Struck {
                fault,
                at,
                until: later(at, DYING),
                victims: vec![pid],
            })
        }
        Fault::ChildKilled => {
            let children = crate::history::children_of(fleet.supervisor.pid());
            let pid = *children.get(rng.random_range(0..children.len().max(1)))?;
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .ok()?;
            let at = At::now();
            Some(Struck {
                fault,
                at,
                until: later(at, DYING),
                victims: vec![pid],
            })
        }
        Fault::SupervisorKilled | Fault::ReaperKilled | Fault::SchedulerKilled => {
            let p = match fault {
                Fault::SupervisorKilled => &mut fleet.supervisor,
                Fault::ReaperKilled => &mut fleet.reaper,
                _ => &mut fleet.scheduler,
            };
            let at = p.sigkill().await;
            pause(rng, 200, 2000).await;
            p.respawn();
            Some(Struck {
                fault,
                at,
                until: at,
                victims: Vec::new(),
            })
        }
        Fault::SessionsKilled => {
            let all = rng.random_bool(0.5);
            let killed = kill_relay_sessions(fleet, all, rng).await;
            (killed > 0).then(|| Struck {
                fault,
                at: At::now(),
                until: At::now(),
                victims: Vec::new(),
            })
        }
        Fault::ShortCut | Fault::LongCut => {
            let (victims, length) = if fault == Fault::ShortCut {
                (
                    Vec::new(),
                    Duration::from_millis(rng.random_range(1000..3000)),
                )
            } else {
                let mut pids: Vec<u32> = fleet.workers.iter().map(|w| w.pid()).collect();
                pids.push(std::process::id());
                (pids, Duration::from_secs(15))
            };
            if rng.random_bool(0.5) {
                fleet.relay.cut();
            } else {
                fleet.relay.blackhole();
            }
            let at = At::now();
            tokio::time::sleep(length).await;
            fleet.relay.heal();
            Some(Struck {
                fault,
                at,
                until: At::now(),
                victims,
            })
        }
        Fault::ServerKilled | Fault::NodeKilled | Fault::NodeIsolated => {
            // Any worker may have a session on the server or node struck.
            let victims = fleet.claimant_pids();
            let node = rng.random_range(1..=3).to_string();
            let at = match &mut fleet.db {
                Database::Private(server) => {
                    server.kill();
                    let at = At::now();
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    server.start().await;
                    at
                }
                Database::Cluster(_) if fault == Fault::NodeKilled => {
                    galera(&["kill", &node]).await;
                    let at = At::now();
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    galera(&["start"]).await;
                    at
                }
                Database::Cluster(_) => {
                    galera(&["isolate", &node, "on"]).await;
                    let at = At::now();
                    tokio::time::sleep(Duration::from_secs(15)).await;
                    galera(&["isolate", &node, "off"]).await;
                    // Returns once all three nodes are in the Primary component again.
                    galera(&["start"]).await;
                    at
                }
            };
            Some(Struck {
                fault,
                at,
                until: At::now(),
                victims,
            })
        }
    }
}

/// `scripts/galera.sh ARGS`, which must succeed.
async fn galera(args: &[&str]) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/galera.sh"))
            .args(&args)
            .output()
            .expect("run scripts/galera.sh")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "scripts/galera.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `KILL CONNECTION` of one (or every) session the relay carries; returns how many.
async fn kill_relay_sessions(fleet: &Fleet, all: bool, rng: &mut StdRng) -> usize {
    let mut ids = fleet.relay.session_ids();
    if ids.is_empty() {
        return 0;
    }
    if !all {
        ids = vec![ids[rng.random_range(0..ids.len())]];
    }
    let Ok(pool) = jobq::connect(
        &jobq::ConnectConfig::new(&fleet.url)
            .unwrap()
            .max_connections(1),
    )
    .await
    else {
        return 0;
    };
    let mut killed = 0;
    for id in ids {
        if sqlx::query(&format!("KILL CONNECTION {id}"))
            .execute(&pool)
            .await
            .is_ok()
        {
            killed += 1;
        }
    }
    pool.close().await;
    killed
}
