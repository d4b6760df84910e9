//! A chaos run: a mixed workload (command, SQL, transactional SQL and library handlers, a schedule,
//! dependencies, a concurrency limit) on a private server for minutes while random faults strike
//! every part of jobq one after another: SIGKILLs of workers, the supervisor and its workers, the
//! reaper and the scheduler; killed sessions; short and long network cuts; the server SIGKILLed and
//! restarted. Then the queue drains, every process stops, and one history of everything that ran
//! goes through the history checker, with the workload's own checks beside it. The run prints a
//! table of what happened, and fails on anything that breaks the promise.
//!
//! Not part of `scripts/test.sh`, being minutes long: `scripts/chaos.sh` runs it (see
//! docs/reliability.md). JOBQ_CHAOS_SECS sets how long faults strike (default 600), JOBQ_CHAOS_SEED
//! repeats a run's choice of faults, JOBQ_CHAOS_REPORT names a file for the table.

mod faults;
mod fleet;
mod library;
mod report;
mod workload;

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::common::scratch_dir;
use crate::history::{At, Expectations, History, check, lock_held};

use faults::Fault;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long: scripts/chaos.sh runs it"]
async fn run() {
    chaos(None).await;
}

/// The same on a database of the 3-node test cluster (JOBQ_GALERA_URLS, as `scripts/galera.sh urls`
/// prints them, comma-separated), whose nodes are SIGKILLed and cut off instead of the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long: scripts/chaos.sh --cluster runs it"]
async fn on_a_cluster() {
    let urls = std::env::var("JOBQ_GALERA_URLS").expect(
        "JOBQ_GALERA_URLS: the cluster's three node URLs (scripts/chaos.sh --cluster sets it)",
    );
    let nodes: Vec<String> = urls.split(',').map(str::to_string).collect();
    assert_eq!(nodes.len(), 3, "JOBQ_GALERA_URLS names three nodes: {urls}");
    chaos(Some(nodes)).await;
}

async fn chaos(cluster: Option<Vec<String>>) {
    let on_cluster = cluster.is_some();
    let seconds = env_u64("JOBQ_CHAOS_SECS").unwrap_or(600);
    let seed = env_u64("JOBQ_CHAOS_SEED").unwrap_or_else(rand::random);
    eprintln!("chaos: {seconds} s of faults, seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = scratch_dir();
    eprintln!("chaos: files in {}", dir.display());
    let files = workload::Files::new(&dir);
    let mut fleet = fleet::Fleet::start(
        &dir,
        &workload::config(&files, &dir, on_cluster),
        workload::install,
        cluster.as_deref(),
    )
    .await;
    let enqueuer = workload::Enqueuer::start(&fleet.url, on_cluster).await;

    // Every kind of fault strikes once first, in a random order, so that even a short run meets all.
    let kinds = Fault::kinds(on_cluster);
    let mut first = kinds.clone();
    first.shuffle(&mut rng);
    let started = Instant::now();
    let mut struck = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1000..4000))).await;
        fleet.restart_exited();
        let fault = first.pop().unwrap_or_else(|| Fault::pick(&mut rng, &kinds));
        // A fault ends within seconds (the longest cut is 15 s); one that does not means something
        // stopped answering, which is a finding in itself, not something to wait out.
        let strike = faults::strike(&mut fleet, fault, &mut rng);
        let struck_now = tokio::time::timeout(Duration::from_secs(120), strike)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} did not end within 120 s: something stopped answering; \
                     the server's log and every process's are in {}",
                    fault.describe(),
                    dir.display()
                )
            });
        if let Some(s) = struck_now {
            eprintln!(
                "chaos: {:>5.1} s {} (victims {:?})",
                started.elapsed().as_secs_f64(),
                fault.describe(),
                s.victims
            );
            struck.push(s);
        }
    }
    fleet.restart_exited();

    // The queue drains with every process up; then they stop, and nothing may be left running.
    let enqueued = enqueuer.stop().await;
    let mut stop_problems: Vec<String> = fleet.stop_scheduler().await.into_iter().collect();
    let pool = jobq::connect(
        &jobq::ConnectConfig::new(&fleet.url)
            .unwrap()
            .max_connections(2),
    )
    .await
    .unwrap();
    let drain_started = Instant::now();
    let unended = "SELECT COUNT(*) FROM job_queue WHERE state NOT IN ('done', 'dead', 'cancelled')";
    loop {
        let left: i64 = sqlx::query_scalar(unended).fetch_one(&pool).await.unwrap();
        if left == 0 || drain_started.elapsed() > Duration::from_secs(300) {
            eprintln!(
                "chaos: drained in {:.1} s ({left} jobs not ended)",
                drain_started.elapsed().as_secs_f64()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop_problems.extend(fleet.stop().await);

    let mut h = History::default();
    h.read_effects_file(&files.effects);
    fleet.library.read_copies(&mut h);
    h.read_sql_effects(&pool, "sql_effects").await;
    h.read_database(&pool).await;
    h.read_worker_log(&fleet.read_logs());
    h.saw_gone_at_lock_handoffs();
    // What is still without an end now was the last copy of its job. Every process is stopped: a
    // command copy is gone once no process holds its job's lock, an SQL copy once no session runs.
    let running_calls: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'CALL%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        running_calls, 0,
        "SQL handlers still run after every worker stopped"
    );
    for job in h.jobs() {
        if h.copies(job).iter().any(|c| c.end.is_none()) {
            let lock = files.locks.join(job.to_string());
            assert!(!lock_held(&lock), "job {job}'s command still runs");
        }
    }
    h.saw_every_copy_gone(At::now());

    let mut expect = Expectations::no_faults();
    let tokens: std::collections::BTreeSet<String> =
        h.events.iter().filter_map(|e| e.claimant.clone()).collect();
    for s in &struck {
        for token in &tokens {
            if report::pid_of(token).is_some_and(|pid| s.victims.contains(&pid)) {
                expect = expect.lost_until(token, s.until);
            }
        }
    }
    let checked = check(&h, &expect);
    let kept = workload::check(&pool, &files, &h, &enqueued.pairs).await;
    let jobs: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), CAST(state AS CHAR), COUNT(*) FROM job_queue \
         GROUP BY kind, state ORDER BY kind, state",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;

    let report = report::Report {
        seconds,
        seed,
        jobs: &jobs,
        struck: &struck,
        checked: &checked,
        duplicates: &report::duplicates(&h, &struck),
        kept: &kept,
        unexpected_exits: &fleet.unexpected_exits,
        stop_problems: &stop_problems,
    };
    let table = report.table();
    eprintln!(
        "\nchaos: {} rounds enqueued, {} failed while the server was down\n\n{table}",
        enqueued.rounds, enqueued.failed_rounds
    );
    if let Ok(path) = std::env::var("JOBQ_CHAOS_REPORT") {
        std::fs::write(&path, &table).unwrap();
    }
    fleet.drop_cluster_database().await;
    let problems = report.problems();
    assert!(
        problems.is_empty(),
        "the chaos run broke the promise ({} problems; files in {}):\n{}",
        problems.len(),
        dir.display(),
        problems.join("\n")
    );
}
