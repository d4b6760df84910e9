//! The reaper: dead claimants' rows come back, live ones are never touched, any number of reapers agree.

use std::time::{Duration, Instant};

use jobq::testing::claim_batch;
use jobq::testing::{Finish, finish};
use jobq::{CancellationToken, Handlers, JobContext, JobError, Mode};
use jobq::{Reaper, ReaperConfig};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{
    TestDb, jobq, scratch_dir, spawn_forever_worker, wait_output, wait_until, write_config,
};
use crate::history::{self, At, Expectations, History, assert_clean};

/// A claim token that parses but belongs to nobody: not registered, no session holds its lock.
fn ghost(n: u32) -> String {
    format!(
        "ghost-host:{}:{n}:1-1:{:016x}",
        4_000_000 + n,
        0xdead_0000_u64 + u64::from(n)
    )
}

fn quick_reaper(db: &TestDb) -> Reaper {
    db.reaper()
}

/// A SIGKILLed worker's job is reset by the reaper within two intervals and run once more by the next
/// worker: the killed copy is gone before the rerun starts, and only the killed claimant's copy was
/// cut short.
#[tokio::test]
async fn a_sigkilled_workers_job_is_runnable_within_two_intervals_and_runs_again_once() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let (effects, lock) = (dir.join("effects"), dir.join("lock"));
    // Attempt 1 sleeps until it is killed; later attempts end at once.
    let script = history::recorded_command(&effects, &lock, "[ $JOBQ_ATTEMPT -gt 1 ] || sleep 30");
    let cfg = write_config(
        &dir,
        &format!("[handlers.victim]\ncommand = [\"sh\", \"-c\", '''\n{script}''']\n"),
    );
    db.exec("INSERT INTO job_queue (kind) VALUES ('victim')")
        .await;
    let worker = spawn_forever_worker(&db, &cfg);
    wait_until("the job running", Duration::from_secs(10), || async {
        let mut h = History::default();
        h.read_effects_file(&effects);
        db.states().await == "running=1" && !h.copies(1).is_empty()
    })
    .await;
    let killed_claimant = history::sole_worker_token(&db.pool).await;
    let listed: i64 = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM jobq_holdings WHERE holder = '{killed_claimant}' \
             AND JSON_CONTAINS(held_ids, '1')"
        ))
        .await;
    assert_eq!(listed, 1, "the running job is on its claimant's list");

    let stop = CancellationToken::new();
    let reaper = Reaper::new(db.pool.clone(), ReaperConfig::default()).unwrap();
    let reaper_task = tokio::spawn(reaper.run(stop.clone()));
    kill(Pid::from_raw(worker.id() as i32), Signal::SIGKILL).unwrap();
    let killed_at = Instant::now();
    let _ = wait_output(worker.take(), Duration::from_secs(5));
    // Still running (until the reaper resets it) means still listed.
    assert_eq!(db.unlisted_running().await, vec![]);
    // The command goes with its worker (the exec shim); no process of the copy holds its lock after.
    wait_until("the killed copy gone", Duration::from_secs(5), || async {
        !history::lock_held(&lock)
    })
    .await;
    let gone_at = At::now();
    wait_until(
        "the job runnable again",
        Duration::from_secs(15),
        || async { db.states().await == "queued=1" },
    )
    .await;
    let took = killed_at.elapsed();
    eprintln!("same-host SIGKILL rescued after {took:?}");
    let bound = ReaperConfig::DEFAULT_INTERVAL * 2 + Duration::from_millis(500);
    assert!(took <= bound, "reset after {took:?}, bound {bound:?}");
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!(job.attempts, 1, "the reset counts the interrupted attempt");
    assert!(job.last_error.unwrap().contains("died"));
    stop.cancel();
    reaper_task.await.unwrap().unwrap();

    // Another worker completes it.
    let out = jobq(
        Some(&db.url),
        &["-v", "worker", "--config", cfg.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(out.status.success());
    assert_eq!(db.states().await, "done=1");
    let mut h = History::default();
    h.read_effects_file(&effects);
    h.read_database(&db.pool).await;
    h.read_worker_log(&String::from_utf8_lossy(&out.stderr));
    h.saw_gone(1, 1, gone_at);
    let summary = assert_clean(&h, &Expectations::no_faults().lost(&killed_claimant));
    let copies = h.copies(1);
    assert_eq!(
        (summary.copies, summary.rerun),
        (2, 1),
        "ran twice, once per claimant:\n{}",
        h.timeline(1)
    );
    assert_eq!(
        (copies[0].attempt, copies[1].attempt),
        (1, 2),
        "{}",
        h.timeline(1)
    );
    assert!(
        !copies[0].ran_to_end && copies[1].ran_to_end,
        "{}",
        h.timeline(1)
    );
}

#[tokio::test]
async fn a_live_worker_running_a_job_longer_than_many_reaper_passes_keeps_its_claim() {
    let db = TestDb::new().await;
    db.insert_jobs("long", 1).await;
    let handlers = Handlers::new()
        .register("long", |_j: JobContext| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok::<(), JobError>(())
        })
        .unwrap();
    let worker = db
        .worker(handlers)
        .config(|c| c.mode = Mode::Drain)
        .start()
        .await;
    wait_until("job running", Duration::from_secs(5), || async {
        db.states().await == "running=1"
    })
    .await;
    let reaper = quick_reaper(&db);
    let mut passes = 0;
    while db.states().await == "running=1" {
        let r = reaper.run_once().await.unwrap();
        assert_eq!(r.dead_claimants, 0, "{r:?}");
        passes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(passes >= 10, "only {passes} passes");
    let report = worker.finished().await;
    assert_eq!((report.done, report.lost), (1, 0));
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!(job.attempts, 1);
}

#[tokio::test]
async fn two_reapers_at_once_reset_each_row_once() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 60).await;
    let kinds = vec!["k".to_string()];
    for g in 0..3 {
        claim_batch(&db.pool, &ghost(g), "default", &kinds, 20)
            .await
            .unwrap();
    }
    db.age_ghost_claims().await;
    assert_eq!(db.unlisted_running().await, vec![]);
    let a = quick_reaper(&db);
    let b = quick_reaper(&db);
    let (ra, rb) = tokio::join!(a.run_once(), b.run_once());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.requeued + rb.requeued, 60, "{ra:?} {rb:?}");
    assert_eq!(db.states().await, "queued=60");
    let lists: i64 = db.scalar("SELECT COUNT(*) FROM jobq_holdings").await;
    assert_eq!(lists, 0, "the gone claimants' lists went with them");
    let attempts: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE attempts = 1 AND last_error LIKE 'claimant ghost-host:%died%'")
        .await;
    assert_eq!(attempts, 60);
}

/// A gone claimant whose list names more rows than one statement can bind (a list past 32,768 ids,
/// padded to the next power of two, passes the 65,535 placeholders of a statement) has every row reset:
/// the reset reads and writes them in chunks, in one transaction. Bound whole, the reset never ended.
#[tokio::test]
async fn a_gone_claimant_holding_more_rows_than_one_statement_binds_has_them_all_reset() {
    let db = TestDb::new().await;
    let n = 40_000;
    db.insert_jobs("k", n).await;
    let token = ghost(7);
    db.exec(&format!(
        "UPDATE job_queue SET state = 'running', claim = '{token}', attempts = 1, \
         claimed_at = NOW(6) - INTERVAL 1 HOUR"
    ))
    .await;
    db.exec(&format!(
        "INSERT INTO jobq_holdings (holder, held_ids) \
         SELECT '{token}', JSON_ARRAYAGG(id) FROM job_queue"
    ))
    .await;
    let listed: i64 = db
        .scalar("SELECT JSON_LENGTH(held_ids) FROM jobq_holdings")
        .await;
    assert_eq!(listed, n as i64, "the list names every row");
    // A list bound whole sent more parameters than the protocol's count holds, and the reset hung.
    let r = tokio::time::timeout(Duration::from_secs(60), quick_reaper(&db).run_once())
        .await
        .expect("the reset ends")
        .unwrap();
    assert_eq!(r.requeued, n as u64, "{r:?}");
    assert_eq!(db.states().await, format!("queued={n}"));
    let released: i64 = db
        .scalar("SELECT COUNT(*) FROM jobq_attempts WHERE outcome = 'released'")
        .await;
    assert_eq!(released, n as i64, "each reset attempt recorded once");
}

/// A reset writes none of the payload and runs with MariaDB's checks off (`jobq::statements`,
/// `unchecked`): a row whose payload was made invalid while it ran (written past the check) is reset
/// with the claimant's other rows, and the next claim sets it aside. Before, MariaDB refused the reset
/// with error 4025, and none of the gone claimant's rows ever ran again.
#[tokio::test]
async fn a_running_row_whose_payload_was_made_invalid_is_reset_and_then_set_aside() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 10).await;
    let kinds = vec!["k".to_string()];
    let claimed = claim_batch(&db.pool, &ghost(0), "default", &kinds, 10)
        .await
        .unwrap();
    let bad = claimed[3].id.0;
    db.age_ghost_claims().await;
    let mut app = db.unchecked_conn().await;
    sqlx::query("UPDATE job_queue SET payload = '{oops' WHERE id = ?")
        .bind(bad)
        .execute(&mut app)
        .await
        .unwrap();
    let report = quick_reaper(&db).run_once().await.unwrap();
    assert_eq!((report.requeued, report.ended), (10, 0), "{report:?}");
    assert_eq!(db.states().await, "queued=10");

    let again = claim_batch(&db.pool, &ghost(1), "default", &kinds, 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 9);
    assert!(again.iter().all(|j| j.id.0 != bad));
    let (state, error, payload): (String, String, String) = sqlx::query_as(
        "SELECT CAST(state AS CHAR), last_error, CAST(payload AS CHAR) FROM job_queue WHERE id = ?",
    )
    .bind(bad)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((state.as_str(), payload.as_str()), ("dead", "{oops"));
    assert!(error.contains("not valid JSON"), "{error}");
}

#[tokio::test]
async fn a_reaper_racing_a_late_finish_never_lets_both_win() {
    let db = TestDb::new().await;
    let kinds = vec!["k".to_string()];
    for round in 0..25u32 {
        db.exec("DELETE FROM job_queue").await;
        db.insert_jobs("k", 1).await;
        let token = ghost(100 + round);
        let job = claim_batch(&db.pool, &token, "default", &kinds, 1)
            .await
            .unwrap()
            .remove(0);
        db.age_ghost_claims().await;
        let reaper = quick_reaper(&db);
        let pool = db.pool.clone();
        let (reaped, finished) = tokio::join!(reaper.run_once(), async {
            tokio::time::sleep(Duration::from_millis(u64::from(round % 7))).await;
            finish(&pool, job.id, &token, job.attempt(), &Finish::Done).await
        });
        let (reaped, finished) = (reaped.unwrap(), finished.unwrap());
        let state = db.states().await;
        match (finished, reaped.requeued) {
            (true, 0) => assert_eq!(state, "done=1"),
            (false, 1) => assert_eq!(state, "queued=1"),
            other => panic!(
                "round {round}: finish and reset both took effect or neither: {other:?}, {state}"
            ),
        }
    }
}

#[tokio::test]
async fn a_job_that_kills_its_worker_every_time_ends_dead() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (kind, max_attempts) VALUES ('poison', 2)")
        .await;
    let kinds = vec!["poison".to_string()];
    let reaper = quick_reaper(&db);
    for g in 0..2 {
        assert_eq!(
            claim_batch(&db.pool, &ghost(200 + g), "default", &kinds, 1)
                .await
                .unwrap()
                .len(),
            1
        );
        db.age_ghost_claims().await;
        reaper.run_once().await.unwrap();
    }
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!((job.state, job.attempts), (jobq::State::Dead, 2));
    assert!(job.last_error.unwrap().contains(&ghost(201)));
    assert!(job.finished_at.is_some());
    let attempts = jobq::Jobs::new(db.pool.clone()).attempts(1).await.unwrap();
    let seen: Vec<(u16, &str, String)> = attempts
        .iter()
        .map(|a| (a.attempt, a.outcome.as_str(), a.claim.clone().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [(1, "released", ghost(200)), (2, "released", ghost(201))]
    );
}

#[tokio::test]
async fn dead_processes_leave_the_registry_and_live_ones_stay() {
    let db = TestDb::new().await;
    let me = jobq::testing::ProcessIdentity::current();
    // A process on this host that no longer exists, one whose heartbeat is past the lease, and one whose
    // registration came from a process (this one) that is alive and well.
    db.exec(&format!(
        "INSERT INTO jobq_processes (token, role, host, host_id, pid, connection_id, server_id, server_epoch, \
         version, heartbeat_at) VALUES \
         ('{g1}', 'worker', '{h}', '{hid}', 4000001, 1, 1, 1, 'x', NOW(6)), \
         ('{g2}', 'worker', 'elsewhere', 'other', 4000002, 1, 1, 1, 'x', NOW(6) - INTERVAL 5 MINUTE)",
        g1 = ghost(1),
        g2 = ghost(2),
        h = me.host,
        hid = me.host_id,
    ))
    .await;
    let handlers = Handlers::new()
        .register("x", |_j: JobContext| async { Ok::<(), JobError>(()) })
        .unwrap();
    let worker = db.worker(handlers).start().await;
    wait_until("worker registered", Duration::from_secs(5), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_processes")
            .await
            == 3
    })
    .await;
    let r = quick_reaper(&db).run_once().await.unwrap();
    assert_eq!(r.forgotten, 2, "{r:?}");
    let left: i64 = db
        .scalar("SELECT COUNT(*) FROM jobq_processes WHERE token NOT LIKE 'ghost%'")
        .await;
    assert_eq!(left, 1, "the live worker stays registered");
    worker.stop().await;
}

#[tokio::test]
async fn the_reaper_binary_runs_once_and_prunes() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 3).await;
    db.exec(
        "UPDATE job_queue SET state = 'done', finished_at = NOW(6) - INTERVAL 30 DAY WHERE id = 1",
    )
    .await;
    claim_batch(&db.pool, &ghost(7), "default", &["k".to_string()], 1)
        .await
        .unwrap();
    db.age_ghost_claims().await;
    // An attempt that ended long ago goes with the old jobs; a recent one stays.
    db.exec(
        "INSERT INTO jobq_attempts (job_id, attempt, outcome, ended_at) \
         VALUES (1, 1, 'retry', NOW(6) - INTERVAL 30 DAY), (2, 1, 'retry', NOW(6))",
    )
    .await;
    let out = jobq(Some(&db.url), &["reaper", "--once"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("jobs requeued: 1") && stdout.contains("jobs pruned: 1"),
        "{stdout}"
    );
    assert_eq!(db.states().await, "queued=2");
    let kept: Vec<(u64, Vec<u8>)> =
        sqlx::query_as("SELECT job_id, outcome FROM jobq_attempts ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let kept: Vec<(u64, String)> = kept
        .into_iter()
        .map(|(j, o)| (j, String::from_utf8(o).unwrap()))
        .collect();
    assert_eq!(kept, [(2, "retry".into()), (2, "released".into())]);
}

/// The reaper warns about due jobs that have waited past `unserved_after` with no live worker to claim
/// them, judged by the kinds and queues workers register; jobs a live worker serves, and jobs that have
/// not waited long, are not reported.
#[tokio::test]
async fn the_reaper_reports_due_jobs_no_live_worker_serves() {
    let db = TestDb::new().await;
    // A live worker (fresh heartbeat) on queue `default` with a handler for `x` only.
    db.exec(&format!(
        "INSERT INTO jobq_processes (token, role, host, host_id, pid, connection_id, server_id, \
         server_epoch, version, queues, kinds, heartbeat_ms, fence_ms) VALUES \
         ('{g}', 'worker', 'elsewhere', 'other', 4000009, 1, 1, 1, 'x', 'default', 'x', 2000, 10000)",
        g = ghost(9)
    ))
    .await;
    db.exec(
        "INSERT INTO job_queue (kind, queue, run_at) VALUES \
         ('x', 'default', NOW(6) - INTERVAL 10 MINUTE), \
         ('orphan', 'default', NOW(6) - INTERVAL 10 MINUTE), \
         ('y', 'other', NOW(6) - INTERVAL 10 MINUTE), \
         ('z', 'default', NOW(6) - INTERVAL 1 MINUTE)",
    )
    .await;
    let r = quick_reaper(&db).run_once().await.unwrap();
    assert_eq!(r.unserved, 2, "{r:?}");
    assert_eq!(
        r.dead_claimants, 0,
        "the worker's heartbeat is fresh: {r:?}"
    );
}

/// A reaper judges every claimant first and resets the gone ones' rows after. A claimant judged gone on
/// a stale heartbeat that heartbeats again in between (its network came back) may have claimed the job
/// once more under the same token: the reset must leave it alone. It re-checks the heartbeat it judged
/// on, under the registry row's lock; the model in tests/model found the interleaving.
#[tokio::test]
async fn a_reset_leaves_a_claimant_alone_that_heartbeat_after_its_verdict() {
    let db = TestDb::new().await;
    let token = ghost(7);
    db.exec(&format!(
        "INSERT INTO jobq_processes (token, role, host, host_id, pid, connection_id, server_id, server_epoch, \
         version, heartbeat_at) VALUES \
         ('{token}', 'worker', 'elsewhere', 'other', 4000007, 1, 1, 1, 'x', NOW(6) - INTERVAL 5 MINUTE)"
    ))
    .await;
    db.insert_jobs("x", 2).await;
    let claimed = claim_batch(&db.pool, &token, "default", &["x".to_string()], 2)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let judged: chrono::DateTime<chrono::Utc> = db
        .scalar(&format!(
            "SELECT heartbeat_at FROM jobq_processes WHERE token = '{token}'"
        ))
        .await;
    // The claimant comes back: a heartbeat lands between the verdict and the reset.
    db.exec(&format!(
        "UPDATE jobq_processes SET heartbeat_at = NOW(6) WHERE token = '{token}'"
    ))
    .await;
    let reset = jobq::testing::reset_if_heartbeat_unchanged(&db.pool, &token, Some(judged))
        .await
        .unwrap();
    assert_eq!(reset, None, "a claimant that came back keeps its rows");
    assert_eq!(db.states().await, "running=2");
    // Judged on the heartbeat it shows now, the reset goes ahead, and so it does for an unregistered
    // claimant while it stays unregistered.
    let now: chrono::DateTime<chrono::Utc> = db
        .scalar(&format!(
            "SELECT heartbeat_at FROM jobq_processes WHERE token = '{token}'"
        ))
        .await;
    let reset = jobq::testing::reset_if_heartbeat_unchanged(&db.pool, &token, Some(now))
        .await
        .unwrap()
        .expect("the verdict still holds");
    assert_eq!(reset.len(), 2);
    assert_eq!(db.states().await, "queued=2");
    let registered = jobq::testing::reset_if_heartbeat_unchanged(&db.pool, &token, None)
        .await
        .unwrap();
    assert_eq!(
        registered, None,
        "judged without a registry row, a claimant that has one now is left alone"
    );
}
