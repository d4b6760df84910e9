//! The supervisor: N workers through repeated SIGKILLs, immediate release of a dead child's jobs, and a
//! graceful drain on SIGTERM.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{TestDb, jobq, run_jobq, scratch_dir, wait_output, wait_until, write_config};
use crate::history::{self, At, Expectations, History, assert_clean, children_of};

/// A config whose `nap` jobs sleep `secs` and record their copies in `dir/effects`, each job holding
/// a lock of its own so that jobs running side by side do not meet.
fn recorded_nap(dir: &Path, secs: u32) -> PathBuf {
    let lock = dir.join("lock.$JOBQ_JOB_ID");
    let script = history::recorded_command(&dir.join("effects"), &lock, &format!("sleep {secs}"));
    write_config(dir, &history::command_handler("nap", &script))
}

fn supervise(db: &TestDb, config: &Path, extra: &[&str]) -> Child {
    let mut args = vec!["supervise", "--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    jobq(Some(&db.url), &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

async fn n_workers(sup: u32, n: usize) {
    wait_until(&format!("{n} workers"), Duration::from_secs(15), || async {
        children_of(sup).len() == n
    })
    .await;
}

/// Only the killed children's copies are cut short and run again, each after the killed one stopped
/// (the procedure watches from the server's process list), and every job ends done with its effect.
#[tokio::test]
async fn sigkilled_children_are_replaced_and_every_job_ends_done() {
    let db = TestDb::new().await;
    let procedure = history::recorded_procedure("effect", "effects", "DO SLEEP(0.004);", true);
    db.exec(&history::effects_table("effects")).await;
    db.exec(&procedure).await;
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[handlers.effect]\nsql = \"CALL effect(?, ?, ?)\"\n\
         params = [\"$job_id\", \"$claim\", \"$attempt\"]\n",
    );
    db.exec(
        "INSERT INTO job_queue (kind, payload) \
         SELECT 'effect', JSON_OBJECT('id', seq) FROM seq_1_to_5000",
    )
    .await;
    db.exec("ANALYZE TABLE job_queue").await;
    let sup = supervise(&db, &cfg, &["-n", "3", "--concurrency", "4"]);
    let sup_pid = sup.id();
    n_workers(sup_pid, 3).await;

    let concurrency = 4;
    let mut killed = Vec::new();
    for round in 0..5 {
        wait_until("some jobs done", Duration::from_secs(20), || async {
            // At every look, also while children die: each running row is on its claimant's list.
            assert_eq!(db.unlisted_running().await, vec![], "round {round}");
            db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'done'")
                .await
                > 400 * round
        })
        .await;
        let kids = children_of(sup_pid);
        let victim = kids[rand::random_range(0..kids.len())];
        killed.extend(history::worker_token_of(&db.pool, victim).await);
        kill(Pid::from_raw(victim as i32), Signal::SIGKILL).unwrap();
        // Every child here dies young, so a slot whose child is killed again waits twice as long
        // before its restart (1, 2, 4, 8, 16 s): the victims are drawn at random, and the same slot
        // may lose all five.
        wait_until("the victim replaced", Duration::from_secs(45), || async {
            let k = children_of(sup_pid);
            k.len() == 3 && !k.contains(&victim)
        })
        .await;
    }
    wait_until("all jobs done", Duration::from_secs(90), || async {
        db.states().await == "done=5000"
    })
    .await;
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGTERM).unwrap();
    let out = wait_output(sup, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut h = History::default();
    h.read_sql_effects(&db.pool, "effects").await;
    h.read_database(&db.pool).await;
    let expect = killed
        .iter()
        .fold(Expectations::no_faults(), |e, t| e.lost(t));
    let summary = assert_clean(&h, &expect);
    eprintln!("{summary:?}");
    assert_eq!((summary.jobs, summary.done), (5000, 5000));
    let missing = h.jobs_without_a_whole_copy();
    assert!(missing.is_empty(), "done without their effect: {missing:?}");
    assert!(
        summary.rerun <= killed.len() * concurrency,
        "{} reruns for {} kills of workers running at most {concurrency} jobs",
        summary.rerun,
        killed.len()
    );
    let registered: i64 = db.scalar("SELECT COUNT(*) FROM jobq_processes").await;
    assert_eq!(registered, 0);
}

/// The killed child's copy is gone with it, and the job runs once more, by the next child only.
#[tokio::test]
async fn a_dead_childs_jobs_are_released_at_once_without_a_reaper() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let (effects, lock) = (dir.join("effects"), dir.join("lock"));
    let script = history::recorded_command(&effects, &lock, "[ $JOBQ_ATTEMPT -gt 1 ] || sleep 30");
    let cfg = write_config(&dir, &history::command_handler("nap", &script));
    db.insert_jobs("nap", 1).await;
    let sup = supervise(&db, &cfg, &["-n", "1"]);
    let sup_pid = sup.id();
    wait_until("running", Duration::from_secs(10), || async {
        let started = std::fs::read_to_string(&effects).is_ok_and(|t| t.starts_with("start"));
        db.states().await == "running=1" && started
    })
    .await;
    let child = children_of(sup_pid)[0];
    let killed = history::sole_worker_token(&db.pool).await;
    kill(Pid::from_raw(child as i32), Signal::SIGKILL).unwrap();
    let t0 = Instant::now();
    wait_until("released", Duration::from_secs(5), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE claim IS NULL OR attempts = 2")
            .await
            == 1
    })
    .await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "released after {:?}",
        t0.elapsed()
    );
    wait_until(
        "done on the second attempt",
        Duration::from_secs(15),
        || async { db.states().await == "done=1" },
    )
    .await;
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!(job.attempts, 2);
    assert!(
        job.last_error
            .unwrap()
            .contains("released by its supervisor")
    );
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGTERM).unwrap();
    assert!(wait_output(sup, Duration::from_secs(30)).status.success());
    let mut h = History::of_commands(&effects, &db.pool).await;
    // The second copy took the lock, so the killed one no longer held it when that one started.
    let second = h.copies(1).get(1).map(|c| c.start);
    h.saw_gone(1, 1, second.unwrap_or_else(At::now));
    let summary = assert_clean(&h, &Expectations::no_faults().lost(&killed));
    assert_eq!((summary.copies, summary.rerun), (2, 1), "{}", h.timeline(1));
}

/// A child SIGKILLed mid-statement can have its last claim or registry INSERT reach the server after the
/// supervisor released it. Here those late writes are made by hand just after the death: the second
/// sweep must release them, without a reaper.
#[tokio::test]
async fn writes_that_land_after_a_childs_death_are_released_by_the_second_sweep() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = write_config(&dir, "[handlers.nap]\ncommand = [\"true\"]\n");
    let sup = supervise(&db, &cfg, &["-n", "1"]);
    let sup_pid = sup.id();
    n_workers(sup_pid, 1).await;
    let child = children_of(sup_pid)[0];
    wait_until("the child registered", Duration::from_secs(10), || async {
        db.scalar::<i64>(&format!(
            "SELECT COUNT(*) FROM jobq_processes WHERE pid = {child}"
        ))
        .await
            == 1
    })
    .await;
    kill(Pid::from_raw(child as i32), Signal::SIGKILL).unwrap();
    wait_until("the child released", Duration::from_secs(5), || async {
        db.scalar::<i64>(&format!(
            "SELECT COUNT(*) FROM jobq_processes WHERE pid = {child}"
        ))
        .await
            == 0
    })
    .await;
    let me = jobq::testing::ProcessIdentity::current();
    let token = format!("{}:{child}:1:1-1:00000000000000aa", me.host);
    db.exec(&format!(
        "INSERT INTO jobq_processes (token, role, host, host_id, pid, connection_id, server_id, \
         server_epoch, queues, version, heartbeat_ms, fence_ms) \
         VALUES ('{token}', 'worker', '{}', '{}', {child}, 1, 1, 1, 'default', 'x', 1000, 1000)",
        me.host, me.host_id
    ))
    .await;
    // A claim's stamp writes its claimant's holdings list in the same statement.
    db.exec(&format!(
        "INSERT INTO job_queue (id, kind, state, claim, attempts, claimed_at) \
         VALUES (1, 'nap', 'running', '{token}', 1, NOW(6))"
    ))
    .await;
    db.exec(&format!(
        "INSERT INTO jobq_holdings (holder, held_ids) VALUES ('{token}', '[1]')"
    ))
    .await;
    wait_until(
        "the late writes released",
        Duration::from_secs(10),
        || async {
            db.scalar::<i64>("SELECT COUNT(*) FROM jobq_processes WHERE token LIKE '%00aa'")
                .await
                == 0
                && db.states().await == "done=1"
        },
    )
    .await;
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!(job.attempts, 2, "released once, then run by the new child");
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGTERM).unwrap();
    assert!(wait_output(sup, Duration::from_secs(30)).status.success());
}

/// Each running job's one copy runs to its end and its done is taken: nothing is cut short.
#[tokio::test]
async fn sigterm_drains_the_children_and_exits_0() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = recorded_nap(&dir, 1);
    db.insert_jobs("nap", 4).await;
    let sup = supervise(&db, &cfg, &["-n", "2", "--concurrency", "2", "--reaper"]);
    wait_until("4 running", Duration::from_secs(10), || async {
        db.states().await == "running=4"
    })
    .await;
    kill(Pid::from_raw(sup.id() as i32), Signal::SIGTERM).unwrap();
    let out = wait_output(sup, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(db.states().await, "done=4");
    let registered: i64 = db.scalar("SELECT COUNT(*) FROM jobq_processes").await;
    assert_eq!(
        registered, 0,
        "workers, reaper and supervisor all deregistered"
    );
    let h = History::of_commands(&dir.join("effects"), &db.pool).await;
    let summary = assert_clean(&h, &Expectations::no_faults());
    assert_eq!((summary.copies, summary.done), (4, 4), "{summary:?}");
}

/// A SIGKILLed supervisor's children drain: each running job's copy runs to its end and is finished
/// by its own worker, and the children exit. Linux signals a child each time the supervisor thread
/// that is its parent exits, several times within a millisecond as a killed process's threads go;
/// a child that took the second for an operator's "exit now" abandoned its jobs to the reaper.
#[tokio::test]
async fn a_sigkilled_supervisors_children_finish_their_jobs_and_exit() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = recorded_nap(&dir, 2);
    db.insert_jobs("nap", 4).await;
    let mut sup = supervise(&db, &cfg, &["-n", "2", "--concurrency", "2"]);
    n_workers(sup.id(), 2).await;
    let children = children_of(sup.id());
    wait_until("4 running", Duration::from_secs(10), || async {
        db.states().await == "running=4"
    })
    .await;
    sup.kill().unwrap();
    sup.wait().unwrap();
    wait_until("the children gone", Duration::from_secs(15), || async {
        children.iter().all(|&pid| {
            jobq::testing::local_process(pid, None) == jobq::testing::ProcessState::Dead
        })
    })
    .await;
    // No reaper runs: only the children themselves can have finished their jobs.
    assert_eq!(db.states().await, "done=4");
    let h = History::of_commands(&dir.join("effects"), &db.pool).await;
    let summary = assert_clean(&h, &Expectations::no_faults());
    assert_eq!((summary.copies, summary.done), (4, 4), "{summary:?}");
}

#[tokio::test]
async fn sighup_rolls_every_worker_and_keeps_n_running() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = write_config(&dir, "[handlers.nap]\ncommand = [\"true\"]\n");
    let sup = supervise(&db, &cfg, &["-n", "2", "--scheduler"]);
    let sup_pid = sup.id();
    n_workers(sup_pid, 2).await;
    wait_until("scheduler registered", Duration::from_secs(10), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_processes WHERE role = 'scheduler'")
            .await
            == 1
    })
    .await;
    let before = children_of(sup_pid);
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGHUP).unwrap();
    wait_until("both workers replaced", Duration::from_secs(20), || async {
        let now = children_of(sup_pid);
        now.len() == 2 && now.iter().all(|p| !before.contains(p))
    })
    .await;
    // Still working.
    db.insert_jobs("nap", 3).await;
    wait_until("jobs done", Duration::from_secs(10), || async {
        db.states().await == "done=3"
    })
    .await;
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGTERM).unwrap();
    let out = wait_output(sup, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn sighup_with_a_broken_config_keeps_the_workers_and_a_fixed_one_rolls_them() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let good = "[handlers.k]\ncommand = [\"true\"]\n";
    let cfg = write_config(&dir, good);
    let log_path = dir.join("supervise.log");
    let mut sup = jobq(
        Some(&db.url),
        &["supervise", "-n", "1", "--config", cfg.to_str().unwrap()],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log_path).unwrap())
    .spawn()
    .unwrap();
    let sup_pid = sup.id();
    n_workers(sup_pid, 1).await;
    let first = children_of(sup_pid)[0];
    // The worker has read its config once it is registered; the file may change from then on.
    wait_until("the worker registered", Duration::from_secs(15), || async {
        db.scalar::<i64>(&format!(
            "SELECT COUNT(*) FROM jobq_processes WHERE role = 'worker' AND pid = {first}"
        ))
        .await
            == 1
    })
    .await;
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // A typo in a key: every new worker would refuse to start.
    write_config(&dir, &format!("{good}[worker]\nconcurency = 3\n"));
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGHUP).unwrap();
    wait_until(
        "the refusal in the log",
        Duration::from_secs(15),
        || async { log().contains("config is invalid") },
    )
    .await;
    assert!(
        log().contains("concurency"),
        "the error names the key:\n{}",
        log()
    );
    assert_eq!(children_of(sup_pid), vec![first], "{}", log());
    assert!(
        Path::new(&format!("/proc/{first}")).exists(),
        "the worker still runs"
    );

    // A program that does not exist is refused the same way.
    write_config(&dir, "[handlers.k]\ncommand = [\"/nonexistent/prog\"]\n");
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGHUP).unwrap();
    wait_until("the second refusal", Duration::from_secs(15), || async {
        log().contains("/nonexistent/prog")
    })
    .await;
    assert_eq!(children_of(sup_pid), vec![first], "{}", log());

    // Fixed: SIGHUP rolls the worker.
    write_config(&dir, good);
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGHUP).unwrap();
    wait_until("a new worker", Duration::from_secs(30), || async {
        let now = children_of(sup_pid);
        now.len() == 1 && now[0] != first
    })
    .await;

    kill(Pid::from_raw(sup_pid as i32), Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = sup.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "supervise did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}\n{}", log());
    std::fs::remove_dir_all(&dir).ok();
}

/// An in-process service (the reaper or scheduler under `supervise`) that fails or panics is started
/// again; one that runs until shutdown is not. On tokio's paused clock: every restart delay that falls
/// due while the test waits fires, in order, without the test waiting for it in real time.
#[tokio::test(start_paused = true)]
async fn a_failed_in_process_service_is_started_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    let starts = Arc::new(AtomicU32::new(0));
    let shutdown = jobq::CancellationToken::new();
    let task = jobq::keep_alive("test", Duration::from_millis(10), shutdown.clone(), {
        let (starts, shutdown) = (starts.clone(), shutdown.clone());
        move || {
            let (starts, shutdown) = (starts.clone(), shutdown.clone());
            async move {
                match starts.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(jobq::Error::Invalid {
                        what: "service",
                        reason: "first start fails".into(),
                    }),
                    1 => panic!("second start panics"),
                    _ => {
                        shutdown.cancelled().await;
                        Ok(())
                    }
                }
            }
        }
    });
    crate::common::wait_until("the third start", Duration::from_secs(5), || async {
        starts.load(Ordering::SeqCst) == 3
    })
    .await;
    // Ten first restart delays of paused time: a fourth start would be due well within them.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        starts.load(Ordering::SeqCst),
        3,
        "a running service is left alone"
    );
    shutdown.cancel();
    task.await.unwrap();
}

/// `jobq scale` changes a running supervisor's worker count within seconds: up, then down while jobs
/// run (the retired workers finish theirs first; no job runs twice), then back to its own `-n` on
/// `--reset`. Bad counts and host names are refused with nothing stored.
#[tokio::test]
async fn scale_changes_a_running_supervisors_workers_without_dropping_jobs() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = recorded_nap(&dir, 3);
    let log_path = dir.join("supervise.log");
    let mut sup = jobq(
        Some(&db.url),
        &[
            "supervise",
            "-n",
            "1",
            "-c",
            "2",
            "--config",
            cfg.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log_path).unwrap())
    .spawn()
    .unwrap();
    let pid = sup.id();
    n_workers(pid, 1).await;
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let out = run_jobq(Some(&db.url), &["scale", "-n", "3"]);
    assert!(text(&out).contains("keep 3 workers"), "{}", text(&out));
    let asked = Instant::now();
    n_workers(pid, 3).await;
    eprintln!(
        "scaled up to 3 workers {:?} after jobq scale",
        asked.elapsed()
    );
    wait_until(
        "three registered workers",
        Duration::from_secs(15),
        || async {
            db.scalar::<i64>("SELECT COUNT(*) FROM jobq_processes WHERE role = 'worker'")
                .await
                == 3
        },
    )
    .await;
    db.exec("INSERT INTO job_queue (kind) SELECT 'nap' FROM seq_1_to_6")
        .await;
    wait_until(
        "jobs running on several workers",
        Duration::from_secs(15),
        || async {
            db.scalar::<i64>("SELECT COUNT(DISTINCT claim) FROM job_queue WHERE state = 'running'")
                .await
                >= 2
        },
    )
    .await;
    let out = run_jobq(Some(&db.url), &["scale", "-n", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let asked = Instant::now();
    n_workers(pid, 1).await;
    eprintln!(
        "scaled down to 1 worker {:?} after jobq scale",
        asked.elapsed()
    );
    wait_until("every job done", Duration::from_secs(30), || async {
        db.states().await == "done=6"
    })
    .await;
    let h = History::of_commands(&dir.join("effects"), &db.pool).await;
    let summary = assert_clean(&h, &Expectations::no_faults());
    assert_eq!((summary.copies, summary.done), (6, 6), "{summary:?}");
    let most = h.events.iter().map(|e| e.attempt).max();
    assert_eq!(most, Some(1), "a job was interrupted by the scale-down");

    let out = run_jobq(Some(&db.url), &["scale", "-n", "5000"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("invalid worker count"),
        "{}",
        text(&out)
    );
    let out = run_jobq(Some(&db.url), &["scale", "-n", "2", "--host", "bad host"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("invalid host"), "{}", text(&out));
    let out = run_jobq(Some(&db.url), &["scale"]);
    assert!(
        text(&out).contains("(every host)") && text(&out).contains("1 workers"),
        "{}",
        text(&out)
    );
    let out = run_jobq(Some(&db.url), &["scale", "-n", "2"]);
    assert!(out.status.success(), "{}", text(&out));
    n_workers(pid, 2).await;
    let out = run_jobq(Some(&db.url), &["scale", "--reset"]);
    assert!(
        text(&out).contains("goes back to its own -n"),
        "{}",
        text(&out)
    );
    n_workers(pid, 1).await;
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    let status = sup.wait().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "{log}");
    assert!(log.contains("scaling workers"), "{log}");
}
