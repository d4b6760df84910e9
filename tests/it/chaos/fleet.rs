//! Everything a chaos run strikes: the database (a private server it can SIGKILL and restart, or a
//! database on the 3-node test cluster whose nodes it kills and cuts off), a relay in front of it (so
//! the network can be cut), and the jobq processes: a supervisor of two workers and a reaper and a
//! scheduler on the direct address, two workers and an in-process library worker behind the relay.
//!
//! On the cluster every process names all three nodes and starts on its own one (the supervisor on
//! node 1, the reaper and the scheduler on node 3), and the relay leads to node 2.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::library::LibraryWorker;
use crate::common::{KillOnDrop, PrivateServer, ServerSetup, jobq};
use crate::history::At;
use crate::partial_failure::relay::CutRelay;

/// One jobq process the run starts, kills and starts again, each time with a log of its own.
pub struct Proc {
    pub role: &'static str,
    url: String,
    args: Vec<String>,
    logs: PathBuf,
    child: Option<KillOnDrop>,
    /// When the running copy was started.
    spawned: Instant,
}

/// How long a process gets after its start before a SIGTERM counts as a stop it must make cleanly:
/// until it has installed its handlers, SIGTERM's default action ends it (seen once, a scheduler
/// started again by a fault ending the run killed by the run's closing SIGTERM).
const STARTING: Duration = Duration::from_secs(3);

/// Numbers the log files of all processes, so a restarted process never overwrites its last log.
static SPAWNED: AtomicUsize = AtomicUsize::new(0);

impl Proc {
    fn start(role: &'static str, url: &str, args: &[&str], logs: &Path) -> Proc {
        let mut p = Proc {
            role,
            url: url.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            logs: logs.to_path_buf(),
            child: None,
            spawned: Instant::now(),
        };
        p.respawn();
        p
    }

    /// Starts the process again with the same command line (it must not be running).
    pub fn respawn(&mut self) {
        let n = SPAWNED.fetch_add(1, Ordering::Relaxed);
        let log =
            std::fs::File::create(self.logs.join(format!("{n:04}-{}.log", self.role))).unwrap();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let child = jobq(Some(&self.url), &args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(KillOnDrop::new(child));
        self.spawned = Instant::now();
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILLs the process and waits until it is gone; returns when it was killed.
    pub async fn sigkill(&mut self) -> At {
        let mut child = self.child.take().expect("running").take();
        let _ = child.kill();
        let at = At::now();
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        at
    }

    /// Sends SIGTERM and waits up to `limit` for the process to exit; None if it did not.
    pub async fn sigterm(&mut self, limit: Duration) -> Option<ExitStatus> {
        let started = self.spawned + STARTING;
        if self.child.is_some() && Instant::now() < started {
            tokio::time::sleep_until(started.into()).await;
        }
        let mut child = self.child.take()?.take();
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The exit status of a process that ended by itself, restarting it; None while it runs.
    pub fn restart_if_exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().unwrap()?;
        self.respawn();
        Some(status)
    }
}

/// Where the run's database lives.
pub enum Database {
    /// A MariaDB server of the run's own.
    Private(PrivateServer),
    /// A database of the run's own on the test cluster: each node's URL.
    Cluster(Vec<String>),
}

/// `url` naming database `name` instead of its own.
fn with_database(url: &str, name: &str) -> String {
    let (head, _) = url.rsplit_once('/').expect("a URL with a database");
    format!("{head}/{name}")
}

/// One URL listing every node's host, starting with node `first` (jobq uses the first that serves).
fn all_nodes(nodes: &[String], first: usize) -> String {
    let parts: Vec<(&str, &str, &str)> = nodes
        .iter()
        .map(|u| {
            let (head, db) = u.rsplit_once('/').unwrap();
            let (creds, host) = head.rsplit_once('@').unwrap();
            (creds, host, db)
        })
        .collect();
    let hosts: Vec<&str> = (0..parts.len())
        .map(|i| parts[(first + i) % parts.len()].1)
        .collect();
    format!("{}@{}/{}", parts[0].0, hosts.join(","), parts[0].2)
}

pub struct Fleet {
    pub db: Database,
    pub relay: CutRelay,
    /// The database straight to the server: the supervisor, reaper, scheduler and the run's own reads.
    pub url: String,
    pub supervisor: Proc,
    /// Workers whose every session goes through the relay.
    pub workers: Vec<Proc>,
    pub reaper: Proc,
    pub scheduler: Proc,
    pub library: LibraryWorker,
    pub logs: PathBuf,
    /// Processes that ended without being told to, with their status (each was started again).
    pub unexpected_exits: Vec<String>,
}

impl Fleet {
    /// Starts the server (or takes a database on the cluster whose node URLs are `cluster`), migrates
    /// a database, lets `install` create what the workload needs, and starts every process with the
    /// handlers of `config`.
    pub async fn start<F, Fut>(
        dir: &Path,
        config: &str,
        install: F,
        cluster: Option<&[String]>,
    ) -> Fleet
    where
        F: FnOnce(sqlx::MySqlPool) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let (db, url, relayed, sidecars) = match cluster {
            None => {
                let mut server = PrivateServer::create(ServerSetup {
                    user: None,
                    args: vec!["--max-connections=400".into()],
                    log: Some(dir.join("server.log")),
                });
                server.start().await;
                let url = server.url("chaos");
                (Database::Private(server), url.clone(), url.clone(), url)
            }
            Some(nodes) => {
                let name = format!("chaos_{}", std::process::id());
                let nodes: Vec<String> = nodes.iter().map(|u| with_database(u, &name)).collect();
                let (url, sidecars) = (all_nodes(&nodes, 0), all_nodes(&nodes, 2));
                let relayed = nodes[1].clone();
                (Database::Cluster(nodes), url, relayed, sidecars)
            }
        };
        let out = jobq(Some(&url), &["migrate", "--create-database"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pool = jobq::connect(&jobq::ConnectConfig::new(&url).unwrap().max_connections(2))
            .await
            .unwrap();
        install(pool.clone()).await;
        pool.close().await;

        let relay = CutRelay::start(&relayed).await;
        let relay_url = relay.url(&relayed);
        let cfg = dir.join("jobq.toml");
        std::fs::write(&cfg, config).unwrap();
        let cfg = cfg.to_str().unwrap().to_string();
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let worker = ["-v", "worker", "--forever", "--config", &cfg];
        Fleet {
            supervisor: Proc::start(
                "supervisor",
                &url,
                &["-v", "supervise", "-n", "2", "--config", &cfg],
                &logs,
            ),
            workers: (0..2)
                .map(|_| Proc::start("worker", &relay_url, &worker, &logs))
                .collect(),
            reaper: Proc::start(
                "reaper",
                &sidecars,
                &["-v", "reaper", "--config", &cfg],
                &logs,
            ),
            scheduler: Proc::start(
                "scheduler",
                &sidecars,
                &["-v", "scheduler", "--forever", "--config", &cfg],
                &logs,
            ),
            library: LibraryWorker::start(&relay_url).await,
            db,
            relay,
            url,
            logs,
            unexpected_exits: Vec::new(),
        }
    }

    /// The jobq processes the run started.
    fn procs(&mut self) -> impl Iterator<Item = &mut Proc> {
        std::iter::once(&mut self.supervisor)
            .chain(self.workers.iter_mut())
            .chain([&mut self.reaper, &mut self.scheduler])
    }

    /// Starts again every process that ended by itself, and notes it.
    pub fn restart_exited(&mut self) {
        let mut exits = Vec::new();
        for p in self.procs() {
            if let Some(status) = p.restart_if_exited() {
                exits.push(format!("{} ({status})", p.role));
            }
        }
        if self.library.has_ended() {
            exits.push("the library worker".into());
        }
        self.unexpected_exits.extend(exits);
    }

    /// The worker processes that may hold claims now: the supervisor's children, the relay's workers
    /// and this process (the library worker).
    pub fn claimant_pids(&self) -> Vec<u32> {
        let mut pids = crate::history::children_of(self.supervisor.pid());
        pids.extend(self.workers.iter().map(Proc::pid));
        pids.push(std::process::id());
        pids
    }

    /// Stops the scheduler with SIGTERM, so that no job is made after the queue has drained; returns
    /// what went wrong, if anything.
    pub async fn stop_scheduler(&mut self) -> Option<String> {
        stop(&mut self.scheduler).await
    }

    /// Stops every process still running with SIGTERM (the supervisor drains its children) and the
    /// library worker, and returns what did not stop cleanly.
    pub async fn stop(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for p in self.procs().filter(|p| p.child.is_some()) {
            problems.extend(stop(p).await);
        }
        if let Err(e) = self.library.stop().await {
            problems.push(format!("the library worker: {e}"));
        }
        problems
    }

    /// Drops the run's database on the cluster, which outlives the run (a private server's goes with
    /// it).
    pub async fn drop_cluster_database(&self) {
        let Database::Cluster(nodes) = &self.db else {
            return;
        };
        let (_, name) = nodes[0].rsplit_once('/').unwrap();
        let pool = jobq::connect(
            &jobq::ConnectConfig::new(&self.url)
                .unwrap()
                .max_connections(1),
        )
        .await
        .unwrap();
        sqlx::query(&format!("DROP DATABASE `{name}`"))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }

    /// Every log the processes wrote, for the refused finishes they report.
    pub fn read_logs(&self) -> String {
        let mut all = String::new();
        for entry in std::fs::read_dir(&self.logs).unwrap().flatten() {
            all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
        all
    }
}

/// SIGTERM, and the exit a clean stop makes (0 within a minute); otherwise what happened.
async fn stop(p: &mut Proc) -> Option<String> {
    match p.sigterm(Duration::from_secs(60)).await {
        Some(status) if status.success() => None,
        Some(status) => Some(format!("{} exited {status} on SIGTERM", p.role)),
        None => Some(format!("{} did not exit within 60 s of SIGTERM", p.role)),
    }
}
