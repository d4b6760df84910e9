//! On a 3-node MariaDB Galera cluster: `scripts/test.sh` starts one with `scripts/galera.sh` and lists
//! a URL per node in `JOBQ_GALERA_URLS`. Without it each test says it was skipped and why.
//!
//! Row locks and SKIP LOCKED do not reach across nodes, GET_LOCK and the processlist are node-local:
//! these tests spread jobq's processes over the nodes and check that every job runs exactly once, that
//! claims lost to another node's certification are retried quietly, and that a reaper on one node
//! leaves alone the rows of a live worker connected to another.

use std::time::Duration;

use jobq::ConnectConfig;
use sqlx::{Executor, MySqlPool};

use crate::common::{jobq, scratch_dir, wait_output, write_config};

/// One database of its own on the cluster, reached through each node.
struct ClusterDb {
    name: String,
    /// The database's URL on node 1, 2, 3.
    urls: Vec<String>,
    /// A pool on node 1.
    pool: MySqlPool,
}

impl ClusterDb {
    /// A fresh, migrated database, or None (and a line saying so) without a cluster.
    async fn new(test: &str) -> Option<ClusterDb> {
        let Ok(list) = std::env::var("JOBQ_GALERA_URLS") else {
            eprintln!(
                "SKIPPED {test}: no Galera cluster (JOBQ_GALERA_URLS is unset; scripts/test.sh starts \
                 one with scripts/galera.sh when the machine can)"
            );
            return None;
        };
        let bases: Vec<&str> = list.split(',').filter(|s| !s.is_empty()).collect();
        assert_eq!(bases.len(), 3, "JOBQ_GALERA_URLS names three nodes: {list}");
        let name = format!("jobq_g_{}_{}", std::process::id(), rand::random::<u32>());
        let urls: Vec<String> = bases
            .iter()
            .map(|b| format!("{}/{name}", b.rsplit_once('/').expect("a database part").0))
            .collect();
        let admin = jobq::connect(&ConnectConfig::new(bases[0]).max_connections(1))
            .await
            .expect("connect to node 1");
        admin
            .execute(format!("CREATE DATABASE `{name}`").as_str())
            .await
            .unwrap();
        admin.close().await;
        let pool = jobq::connect(&ConnectConfig::new(&urls[0]).max_connections(4))
            .await
            .unwrap();
        jobq::migrate(&pool).await.expect("migrate on node 1");
        Some(ClusterDb { name, urls, pool })
    }

    async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap()
    }
}

impl Drop for ClusterDb {
    fn drop(&mut self) {
        let (name, url) = (self.name.clone(), self.urls[0].clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(p) = jobq::connect(&ConnectConfig::new(&url).max_connections(1)).await {
                    let _ = p
                        .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
                        .await;
                    p.close().await;
                }
            });
        })
        .join();
    }
}

/// Workers on all three nodes drain one queue: every job's effect exactly once, nothing left running,
/// and the claims lost to other nodes (certification conflicts) are retried without a warning.
#[tokio::test]
async fn workers_on_three_nodes_drain_a_queue_and_run_every_job_once() {
    let Some(db) = ClusterDb::new("galera::workers_on_three_nodes").await else {
        return;
    };
    db.pool
        .execute("CREATE TABLE effects (job_id BIGINT NOT NULL) ENGINE = InnoDB")
        .await
        .unwrap();
    let jobs = 6000;
    // Multi-row INSERTs from the client: no sequence engine needed.
    for chunk in (1..=jobs).collect::<Vec<u32>>().chunks(1000) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| format!("('effect', JSON_OBJECT('id', {i}))"))
            .collect();
        db.pool
            .execute(
                format!(
                    "INSERT INTO job_queue (kind, payload) VALUES {}",
                    values.join(",")
                )
                .as_str(),
            )
            .await
            .unwrap();
    }
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[handlers.effect]\nsql = \"INSERT INTO effects (job_id) VALUES (?)\"\nparams = [\"id\"]\n",
    );
    // Logs go to files: a pipe nobody reads until the end could fill up and stall a worker.
    let args = [
        "worker",
        "--config",
        cfg.to_str().unwrap(),
        "--concurrency",
        "20",
        "--batch-size",
        "20",
    ];
    let workers: Vec<_> = db
        .urls
        .iter()
        .enumerate()
        .map(|(i, url)| {
            let log = dir.join(format!("worker{i}.log"));
            let child = jobq(Some(url), &args)
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            (child, log)
        })
        .collect();
    let mut logs = String::new();
    for (w, log) in workers {
        let out = wait_output(w, Duration::from_secs(120));
        let log = std::fs::read_to_string(log).unwrap();
        assert!(out.status.success(), "a worker failed:\n{log}");
        logs.push_str(&log);
    }
    let done = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE state = 'done'")
        .await;
    let effects = db.scalar("SELECT COUNT(*) FROM effects").await;
    let distinct = db
        .scalar("SELECT COUNT(DISTINCT job_id) FROM effects")
        .await;
    assert_eq!(
        (done, effects, distinct),
        (i64::from(jobs), i64::from(jobs), i64::from(jobs))
    );
    let noisy: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(
        noisy.is_empty(),
        "warnings or errors:\n{}",
        noisy.join("\n")
    );
    // Each node took a share: the claims really were spread.
    let claimed: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("worker stopped"))
        .collect();
    assert_eq!(claimed.len(), 3, "{logs}");
    assert!(
        claimed.iter().all(|l| !l.contains("claimed=0 ")),
        "a node's worker claimed nothing:\n{}",
        claimed.join("\n")
    );
}

/// GET_LOCK and the processlist are node-local: a reaper on node 2 sees neither the lock nor the session
/// of a worker on node 1. It must still leave that live worker's running job alone (its heartbeat,
/// replicated, says it is alive), however many passes it makes.
#[tokio::test]
async fn a_reaper_on_another_node_leaves_a_live_workers_job_alone() {
    let Some(db) = ClusterDb::new("galera::a_reaper_on_another_node").await else {
        return;
    };
    db.pool
        .execute("INSERT INTO job_queue (kind) VALUES ('nap')")
        .await
        .unwrap();
    let dir = scratch_dir();
    let cfg = write_config(&dir, "[handlers.nap]\ncommand = [\"sleep\", \"8\"]\n");
    let worker = jobq(
        Some(&db.urls[0]),
        &["worker", "--config", cfg.to_str().unwrap()],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(dir.join("worker.log")).unwrap())
    .spawn()
    .unwrap();
    let reaper = jobq(
        Some(&db.urls[1]),
        &["reaper", "--interval", "200ms", "--lease", "6s"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(dir.join("reaper.log")).unwrap())
    .spawn()
    .unwrap();
    let out = wait_output(worker, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        std::fs::read_to_string(dir.join("worker.log")).unwrap()
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(reaper.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    wait_output(reaper, Duration::from_secs(30));
    let log = std::fs::read_to_string(dir.join("reaper.log")).unwrap();
    let (state, attempts): (Vec<u8>, u16) =
        sqlx::query_as("SELECT state, attempts FROM job_queue WHERE kind = 'nap'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (String::from_utf8_lossy(&state).into_owned(), attempts),
        ("done".to_string(), 1),
        "the job was taken from its live worker; reaper log:\n{log}"
    );
    assert!(!log.contains("released a dead claimant"), "{log}");
    assert!(
        log.contains("Galera cluster: locks, sessions"),
        "the reaper says what it trusts:\n{log}"
    );
}

/// Schedulers on the three nodes tick together: each planned time still gets exactly one run and one
/// job, and the ticks that lose to another node's certification are retried, not failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn schedulers_on_three_nodes_make_exactly_one_job_per_planned_time() {
    use chrono::TimeZone;
    use jobq::{
        Clock, ManualClock, Misfire, OnError, Overlap, ScheduleDef, Scheduler, SchedulerConfig,
    };
    let Some(db) = ClusterDb::new("galera::schedulers_on_three_nodes").await else {
        return;
    };
    let t0 = chrono::Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
    let clock = ManualClock::new(t0);
    let mut racers = Vec::new();
    for url in &db.urls {
        let pool = jobq::connect(&ConnectConfig::new(url).max_connections(2))
            .await
            .unwrap();
        let cfg = SchedulerConfig {
            clock: Clock::Manual(clock.clone()),
            ..SchedulerConfig::default()
        };
        racers.push(std::sync::Arc::new(Scheduler::new(pool, cfg).unwrap()));
    }
    let schedules = racers[0].schedules();
    let specs = [("every-1s", "every 1s"), ("cron-2s", "*/2 * * * * *")];
    for (name, spec) in specs {
        let def = ScheduleDef::new(name, "race", spec).policies(
            Overlap::Allow,
            OnError::Retry,
            Misfire::All,
        );
        schedules.create(&def).await.unwrap();
    }
    for _ in 0..30 {
        clock.advance(Duration::from_secs(1));
        let mut set = tokio::task::JoinSet::new();
        for r in &racers {
            let r = r.clone();
            set.spawn(async move { r.run_once().await });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().expect("a tick failed");
        }
    }
    let end = clock.now();
    for (name, _) in specs {
        let s = schedules.get(name).await.unwrap();
        let want: Vec<_> = s
            .spec()
            .unwrap()
            .upcoming(t0, s.anchor_at, 1000)
            .into_iter()
            .filter(|t| *t <= end)
            .collect();
        let got: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
            "SELECT r.planned_at FROM jobq_schedule_runs r JOIN jobq_schedules s \
             ON s.id = r.schedule_id WHERE s.name = ? ORDER BY r.planned_at",
        )
        .bind(name)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(got, want, "{name}");
    }
    let jobs = db.scalar("SELECT COUNT(*) FROM job_queue").await;
    let runs = db
        .scalar("SELECT COUNT(DISTINCT job_id) FROM jobq_schedule_runs")
        .await;
    assert_eq!(jobs, runs);
    assert!(jobs >= 40, "{jobs}");
}
