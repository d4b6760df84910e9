//! The promise under partial failure: a job runs twice only when the process running it died, and
//! never two copies at once. Sessions killed under a live worker, a worker SIGKILLed mid-command, the
//! network cut between a worker and the server, a row taken away from a live worker.
//!
//! Command jobs here record their copies and detect overlap themselves (`history::recorded_command`),
//! library handlers through `history::LibraryCopies`; what they recorded, the rows and `jobq_attempts`
//! are checked as one history (`history::check`).

use std::path::Path;
use std::time::{Duration, Instant};

use jobq::{CancellationToken, Handlers, JobContext, JobError, WorkerConfig};
use jobq::{Reaper, ReaperConfig};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub mod relay;

use relay::CutRelay;

use crate::common::{TestDb, jobq, scratch_dir, wait_output, wait_until, write_config};
use crate::history::{self, At, Expectations, History, assert_clean, sole_worker_token};

/// A handler config whose job records its copy in `dir/effects` and holds `dir/lock` while it runs
/// ([`history::recorded_command`]); attempt 1 runs `first` seconds, later ones 1.
fn overlap_detecting_config(dir: &Path, first: u32) -> std::path::PathBuf {
    let body = format!("if [ $JOBQ_ATTEMPT -gt 1 ]; then sleep 1; else sleep {first}; fi");
    let script = history::recorded_command(&dir.join("effects"), &dir.join("lock"), &body);
    write_config(
        dir,
        &format!("[handlers.guarded]\ncommand = [\"sh\", \"-c\", '''\n{script}''']\n"),
    )
}

/// `jobq -v worker --forever` with its log in `dir/worker.log` (named in failure messages).
fn spawn_worker(url: &str, cfg: &Path, dir: &Path) -> std::process::Child {
    let log = std::fs::File::create(dir.join("worker.log")).unwrap();
    jobq(
        Some(url),
        &[
            "-v",
            "worker",
            "--forever",
            "--config",
            cfg.to_str().unwrap(),
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(log)
    .spawn()
    .unwrap()
}

/// Waits for the worker to exit after SIGTERM; its log is in `dir/worker.log`. The wait runs on a
/// blocking thread: the relay's tasks live on this test's runtime and must keep running meanwhile.
async fn stop_worker(worker: std::process::Child, dir: &Path) -> String {
    eprintln!("worker log: {}", dir.join("worker.log").display());
    kill(Pid::from_raw(worker.id() as i32), Signal::SIGTERM).unwrap();
    let out = tokio::task::spawn_blocking(move || wait_output(worker, Duration::from_secs(30)))
        .await
        .unwrap();
    let log = std::fs::read_to_string(dir.join("worker.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "worker exited with {}; log in {}",
        out.status,
        dir.join("worker.log").display()
    );
    log
}

/// What the handlers recorded so far, and the database when `db` is given.
async fn history(dir: &Path, db: Option<&TestDb>) -> History {
    let mut h = History::default();
    h.read_effects_file(&dir.join("effects"));
    if let Some(db) = db {
        h.read_database(&db.pool).await;
    }
    h
}

/// Whether a copy of `attempt` of job 1 has started.
async fn started(dir: &Path, attempt: u16) -> bool {
    let h = history(dir, None).await;
    h.copies(1).iter().any(|c| c.attempt == attempt)
}

/// Whether some process still holds the job's lock.
fn lock_held(dir: &Path) -> bool {
    history::lock_held(&dir.join("lock"))
}

fn reaper(db: &TestDb) -> (tokio::task::JoinHandle<jobq::Result<()>>, CancellationToken) {
    let stop = CancellationToken::new();
    let r = Reaper::new(
        db.pool.clone(),
        ReaperConfig {
            retention: None,
            ..ReaperConfig::default()
        },
    )
    .unwrap();
    (tokio::spawn(r.run(stop.clone())), stop)
}

/// One `guarded` job (attempt 1 runs `first` seconds) run by a forever worker through a relay, with a
/// reaper running beside it; returned once the job has started.
struct Scene {
    db: TestDb,
    dir: std::path::PathBuf,
    relay: CutRelay,
    worker: std::process::Child,
    reaper_task: tokio::task::JoinHandle<jobq::Result<()>>,
    reaper_stop: CancellationToken,
}

impl Scene {
    async fn start(first: u32) -> Scene {
        let db = TestDb::new().await;
        let dir = scratch_dir();
        let cfg = overlap_detecting_config(&dir, first);
        let relay = CutRelay::start(&db.url).await;
        db.exec("INSERT INTO job_queue (kind) VALUES ('guarded')")
            .await;
        let (reaper_task, reaper_stop) = reaper(&db);
        let worker = spawn_worker(&relay.url(&db.url), &cfg, &dir);
        wait_until("the job running", Duration::from_secs(10), || async {
            started(&dir, 1).await
        })
        .await;
        Scene {
            db,
            dir,
            relay,
            worker,
            reaper_task,
            reaper_stop,
        }
    }
}

/// Stops a scene's worker (SIGTERM, checked to exit 0) and reaper; returns the worker's log.
async fn finish(
    worker: std::process::Child,
    dir: &Path,
    reaper_task: tokio::task::JoinHandle<jobq::Result<()>>,
    reaper_stop: CancellationToken,
) -> String {
    let log = stop_worker(worker, dir).await;
    reaper_stop.cancel();
    reaper_task.await.unwrap().unwrap();
    log
}

/// A live worker whose every session is killed (a proxy restart, `wait_timeout`, a DBA) re-registers
/// on new sessions and finishes its job; the reaper never hands the job on meanwhile.
#[tokio::test]
async fn a_live_worker_whose_sessions_are_killed_runs_its_job_once() {
    let Scene {
        db,
        dir,
        relay,
        worker,
        reaper_task,
        reaper_stop,
    } = Scene::start(8).await;
    // Twice, a couple of seconds apart, as a flapping proxy would.
    for _ in 0..2 {
        assert!(relay.kill_sessions(&db).await >= 2, "the worker's sessions");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    wait_until("the job done", Duration::from_secs(30), || async {
        db.states().await == "done=1"
    })
    .await;
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!(job.attempts, 1);
    // The worker is still registered (the reaper did not take it for dead).
    let workers: i64 = db
        .scalar("SELECT COUNT(*) FROM jobq_processes WHERE role = 'worker'")
        .await;
    assert_eq!(workers, 1);
    let log = finish(worker, &dir, reaper_task, reaper_stop).await;
    let mut h = history(&dir, Some(&db)).await;
    h.read_worker_log(&log);
    let summary = assert_clean(&h, &Expectations::no_faults());
    assert_eq!(summary.copies, 1, "ran once:\n{}", h.timeline(1));
}

/// A SIGKILLed worker's command dies with it (through the exec shim), so the retry never runs beside
/// it, even with one attempt only.
#[tokio::test]
async fn a_sigkilled_workers_command_dies_with_it() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = overlap_detecting_config(&dir, 60);
    db.exec("INSERT INTO job_queue (kind, max_attempts) VALUES ('guarded', 2)")
        .await;
    let worker = spawn_worker(&db.url, &cfg, &dir);
    wait_until("the job running", Duration::from_secs(10), || async {
        started(&dir, 1).await
    })
    .await;
    assert!(lock_held(&dir));
    let pid = history(&dir, None).await.copies(1)[0].pid;
    let killed_claimant = sole_worker_token(&db.pool).await;
    kill(Pid::from_raw(worker.id() as i32), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    let _ = tokio::task::spawn_blocking(move || wait_output(worker, Duration::from_secs(5))).await;
    wait_until("the command gone", Duration::from_secs(1), || async {
        // A zombie (dead, not yet reaped by init) counts as gone.
        !lock_held(&dir)
            && jobq::testing::local_process(pid, None) == jobq::testing::ProcessState::Dead
    })
    .await;
    let gone_after = killed.elapsed();
    let gone_at = At::now();
    assert!(gone_after < Duration::from_secs(1), "{gone_after:?}");

    // The reaper on this host sees the process gone and hands the job on; the next worker runs it.
    let (reaper_task, reaper_stop) = reaper(&db);
    wait_until("the job queued again", Duration::from_secs(10), || async {
        db.states().await == "queued=1"
    })
    .await;
    reaper_stop.cancel();
    reaper_task.await.unwrap().unwrap();
    let out = jobq(
        Some(&db.url),
        &["worker", "--config", cfg.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(db.states().await, "done=1");
    let mut h = history(&dir, Some(&db)).await;
    h.saw_gone(1, 1, gone_at);
    h.read_worker_log(&String::from_utf8_lossy(&out.stderr));
    let summary = assert_clean(&h, &Expectations::no_faults().lost(&killed_claimant));
    let copies = h.copies(1);
    assert_eq!((summary.copies, summary.rerun), (2, 1), "{}", h.timeline(1));
    assert!(
        !copies[0].ran_to_end && copies[1].ran_to_end,
        "the first copy never finished, the second did:\n{}",
        h.timeline(1)
    );
}

/// A network cut longer than the fence: the worker stops its job itself before the reaper (which
/// sees the sessions gone at once) may hand it on, and runs it again once the network is back.
#[tokio::test]
async fn a_network_cut_longer_than_the_fence_stops_the_job_before_it_is_handed_on() {
    let Scene {
        db,
        dir,
        relay,
        worker,
        reaper_task,
        reaper_stop,
    } = Scene::start(60).await;
    let cut_off = sole_worker_token(&db.pool).await;
    relay.cut();
    let cut_at = Instant::now();
    // The reaper may reset the row only after the worker's fence (10 s) plus the margin (2 s) from
    // its last heartbeat; by then the first copy must be gone.
    wait_until("the row reset", Duration::from_secs(20), || async {
        db.states().await == "queued=1"
    })
    .await;
    let reset_after = cut_at.elapsed();
    assert!(
        !lock_held(&dir),
        "the first copy still runs after the reset"
    );
    let gone_at = At::now();
    // Not on the lost session at once: only once the heartbeat written at most one interval before
    // the cut is older than the fence plus the margin.
    assert!(
        reset_after
            >= WorkerConfig::DEFAULT_FENCE_AFTER + jobq::testing::MARGIN
                - WorkerConfig::DEFAULT_HEARTBEAT
                - Duration::from_millis(500),
        "reset {reset_after:?} after the cut"
    );
    relay.heal();
    wait_until("the job done", Duration::from_secs(30), || async {
        db.states().await == "done=1"
    })
    .await;
    let log = finish(worker, &dir, reaper_task, reaper_stop).await;
    assert!(log.contains("cannot confirm liveness"), "{log}");
    let mut h = history(&dir, Some(&db)).await;
    h.saw_gone(1, 1, gone_at);
    h.read_worker_log(&log);
    let summary = assert_clean(&h, &Expectations::no_faults().lost(&cut_off));
    assert_eq!((summary.copies, summary.rerun), (2, 1), "{}", h.timeline(1));
    assert!(
        !h.copies(1)[0].ran_to_end,
        "the first copy was stopped:\n{}",
        h.timeline(1)
    );
}

/// A cut shorter than the fence is ridden out: the job is neither stopped nor handed on.
#[tokio::test]
async fn a_network_cut_shorter_than_the_fence_is_ridden_out() {
    let Scene {
        db,
        dir,
        relay,
        worker,
        reaper_task,
        reaper_stop,
    } = Scene::start(10).await;
    relay.cut();
    tokio::time::sleep(Duration::from_secs(4)).await;
    relay.heal();
    wait_until("the job done", Duration::from_secs(30), || async {
        db.states().await == "done=1"
    })
    .await;
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!(job.attempts, 1);
    let log = finish(worker, &dir, reaper_task, reaper_stop).await;
    let mut h = history(&dir, Some(&db)).await;
    h.read_worker_log(&log);
    let summary = assert_clean(&h, &Expectations::no_faults());
    assert_eq!(
        summary.copies,
        1,
        "ridden out, ran once:\n{}",
        h.timeline(1)
    );
}

/// A row taken away from a live worker (an operator's reset, a reaper's mistaken verdict) stops that
/// worker's copy within about a second, and the copy records nothing; the same worker runs the job
/// again, but only once that copy has ended.
#[tokio::test]
async fn a_copy_whose_row_is_taken_away_is_stopped() {
    let db = TestDb::new().await;
    db.insert_jobs("long", 1).await;
    let copies = history::LibraryCopies::new();
    let recorder = copies.clone();
    let handlers = Handlers::new()
        .register("long", move |job: JobContext| {
            let recorder = recorder.clone();
            async move {
                let copy = recorder.start(&job);
                if job.attempt == 1 {
                    job.cancelled().await;
                    return Err(JobError::retry("stopped"));
                }
                copy.ended();
                Ok::<(), JobError>(())
            }
        })
        .unwrap();
    let worker = db.worker(handlers).start().await;
    wait_until("the job running", Duration::from_secs(10), || async {
        db.states().await == "running=1"
    })
    .await;
    db.exec("UPDATE job_queue SET state = 'queued', claim = NULL WHERE id = 1")
        .await;
    let taken = Instant::now();
    wait_until("the copy stopped", Duration::from_secs(5), || async {
        let mut h = History::default();
        h.read_library_copies(&copies);
        h.copies(1).first().is_some_and(|c| c.end.is_some())
    })
    .await;
    assert!(
        taken.elapsed() < Duration::from_secs(3),
        "{:?}",
        taken.elapsed()
    );
    wait_until("the job done", Duration::from_secs(10), || async {
        db.states().await == "done=1"
    })
    .await;
    let report = worker.stop().await;
    assert_eq!(report.lost, 1, "{report:?}");
    assert_eq!(report.done, 1, "{report:?}");
    let mut h = History::default();
    h.read_library_copies(&copies);
    h.read_database(&db.pool).await;
    let summary = assert_clean(&h, &Expectations::no_faults().taken(1, 1));
    let copies = h.copies(1);
    assert_eq!((summary.copies, summary.rerun), (2, 1), "{}", h.timeline(1));
    assert!(
        !copies[0].ran_to_end && copies[1].ran_to_end,
        "the first copy was stopped, the second ran:\n{}",
        h.timeline(1)
    );
}

/// A fenced worker cannot reach the server to stop its SQL job's statement, which runs on there (the
/// server has not noticed the partition: its sessions live on, so the reaper goes by the lease); the
/// next attempt ends that statement's session before it starts its own, so the two never overlap.
#[tokio::test]
async fn an_sql_job_of_a_cut_off_worker_is_stopped_on_the_server_before_the_next_attempt() {
    let db = TestDb::new().await;
    db.exec(&history::effects_table("sql_effects")).await;
    // Attempt 1 sleeps a minute; later ones end at once. Each copy records whether the earlier ones
    // still ran on the server when it began.
    let body = "IF p_attempt = 1 THEN DO SLEEP(60); END IF;";
    db.exec(&history::recorded_procedure(
        "guarded",
        "sql_effects",
        body,
        true,
    ))
    .await;
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[handlers.guarded]\nsql = \"CALL guarded(?, ?, ?)\"\nparams = [\"$job_id\", \"$claim\", \"$attempt\"]\n",
    );
    let relay = CutRelay::start(&db.url).await;
    db.exec("INSERT INTO job_queue (kind) VALUES ('guarded')")
        .await;
    let cut_off = spawn_worker(&relay.url(&db.url), &cfg, &dir);
    wait_until("the statement running", Duration::from_secs(10), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM sql_effects").await == 1
    })
    .await;
    let cut_off_claimant = sole_worker_token(&db.pool).await;
    relay.blackhole();
    let stop = CancellationToken::new();
    let reaper_task = tokio::spawn(
        Reaper::new(
            db.pool.clone(),
            ReaperConfig {
                retention: None,
                lease: Duration::from_secs(12),
                ..ReaperConfig::default()
            },
        )
        .unwrap()
        .run(stop.clone()),
    );
    let reaper_stop = stop;
    wait_until("the row reset", Duration::from_secs(25), || async {
        db.states().await == "queued=1"
    })
    .await;
    // The first statement still sleeps on the server: the worker that ran it cannot reach it.
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM sql_effects WHERE what = 'end'")
            .await,
        0
    );
    let out = jobq(
        Some(&db.url),
        &["worker", "--config", cfg.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!(db.states().await, "done=1", "{:?}", job.last_error);
    // The first copy was recorded gone before the second began, and only it was cut short.
    let mut h = History::default();
    h.read_sql_effects(&db.pool, "sql_effects").await;
    h.read_database(&db.pool).await;
    h.read_worker_log(&String::from_utf8_lossy(&out.stderr));
    let summary = assert_clean(&h, &Expectations::no_faults().lost(&cut_off_claimant));
    assert_eq!((summary.copies, summary.rerun), (2, 1), "{}", h.timeline(1));
    // And the first statement no longer runs anywhere.
    let sleeping: i64 = db
        .scalar(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE DB = DATABASE() AND INFO LIKE 'DO SLEEP%'",
        )
        .await;
    assert_eq!(sleeping, 0, "the first attempt's statement still runs");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("earlier attempt's statement"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    relay.heal();
    reaper_stop.cancel();
    reaper_task.await.unwrap().unwrap();
    stop_worker(cut_off, &dir).await;
}

/// A worker SIGKILLed where the reaper cannot see its process (another pid namespace stands in for
/// another host) is rescued by the session signal once its fence and the margin have passed since its
/// last heartbeat: within fence + margin + one reaper interval, never before the fence.
#[tokio::test]
async fn a_sigkilled_worker_on_another_host_is_rescued_after_its_fence() {
    if !std::process::Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("skipped: cannot make a pid namespace here (unshare needs root)");
        return;
    }
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = overlap_detecting_config(&dir, 60);
    db.exec("INSERT INTO job_queue (kind) VALUES ('guarded')")
        .await;
    let (reaper_task, reaper_stop) = reaper(&db);
    let mut elsewhere = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child=SIGKILL", "--"])
        .arg(crate::common::jobq_bin())
        .args(["worker", "--forever", "--config", cfg.to_str().unwrap()])
        .env("JOBQ_DATABASE_URL", &db.url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the job running", Duration::from_secs(10), || async {
        started(&dir, 1).await
    })
    .await;
    let host_ids: i64 = db
        .scalar("SELECT COUNT(DISTINCT host_id) FROM jobq_processes")
        .await;
    assert_eq!(host_ids, 2, "the worker runs in a pid namespace of its own");
    let killed_claimant = sole_worker_token(&db.pool).await;
    elsewhere.kill().unwrap();
    let killed = Instant::now();
    elsewhere.wait().unwrap();
    let last_beat = history::last_heartbeat_us(&db.pool, &killed_claimant).await;
    wait_until("the row reset", Duration::from_secs(25), || async {
        db.states().await == "queued=1"
    })
    .await;
    let rescued = killed.elapsed();
    // Both ends by the server's clock: the heartbeat's age read before the kill and a client-side
    // timer after it left out the time between the two, and so once put a reset 28 ms early.
    let released = history::released_us(&db.pool, &killed_claimant).await;
    let since_beat = Duration::from_micros((released - last_beat).max(0) as u64);
    eprintln!(
        "other-host SIGKILL rescued after {rescued:?} ({since_beat:?} after the last heartbeat)"
    );
    let bound = WorkerConfig::DEFAULT_FENCE_AFTER + jobq::testing::MARGIN;
    assert!(
        since_beat >= bound,
        "reset {since_beat:?} after the last heartbeat"
    );
    assert!(
        rescued <= bound + ReaperConfig::DEFAULT_INTERVAL + Duration::from_secs(3),
        "rescued after {rescued:?}"
    );
    assert!(!lock_held(&dir), "the killed worker's command died with it");
    let gone_at = At::now();
    reaper_stop.cancel();
    reaper_task.await.unwrap().unwrap();
    let mut h = history(&dir, Some(&db)).await;
    h.saw_gone(1, 1, gone_at);
    assert_clean(&h, &Expectations::no_faults().lost(&killed_claimant));
    assert!(
        h.events_of(1)
            .iter()
            .any(|e| e.kind == history::Kind::Reset),
        "the reaper's reset is recorded:\n{}",
        h.timeline(1)
    );
}

/// Services started before their database (a reboot where MariaDB comes up late) wait for it and then
/// register, instead of exiting and leaving a service manager to crash-loop them.
#[tokio::test]
async fn services_started_before_the_database_wait_for_it() {
    let db = TestDb::new().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (head, name) = db.url.rsplit_once('/').unwrap();
    let (user, _) = head.rsplit_once('@').unwrap();
    let late_url = format!("{user}@127.0.0.1:{port}/{name}");
    let dir = scratch_dir();
    let spawn = |args: &[&str], log: &str| {
        jobq(Some(&late_url), args)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join(log)).unwrap())
            .spawn()
            .unwrap()
    };
    let mut reaper = spawn(&["reaper"], "reaper.log");
    let mut scheduler = spawn(&["scheduler", "--forever"], "scheduler.log");
    // The pool tries to connect for its acquire timeout (10 s), then the service backs off and says so.
    wait_until("both waiting", Duration::from_secs(20), || async {
        ["reaper.log", "scheduler.log"].iter().all(|f| {
            std::fs::read_to_string(dir.join(f))
                .unwrap_or_default()
                .contains("database unavailable; waiting")
        })
    })
    .await;
    assert!(reaper.try_wait().unwrap().is_none(), "the reaper gave up");
    assert!(
        scheduler.try_wait().unwrap().is_none(),
        "the scheduler gave up"
    );
    let _relay = CutRelay::start_on(&db.url, port).await;
    wait_until("both registered", Duration::from_secs(30), || async {
        db.scalar::<i64>(
            "SELECT COUNT(*) FROM jobq_processes WHERE role IN ('reaper', 'scheduler')",
        )
        .await
            == 2
    })
    .await;
    for (child, log) in [(reaper, "reaper.log"), (scheduler, "scheduler.log")] {
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let out = tokio::task::spawn_blocking(move || wait_output(child, Duration::from_secs(20)))
            .await
            .unwrap();
        let text = std::fs::read_to_string(dir.join(log)).unwrap();
        assert!(out.status.success(), "{log}: {text}");
    }
    let left: i64 = db.scalar("SELECT COUNT(*) FROM jobq_processes").await;
    assert_eq!(left, 0, "both deregistered");
}

/// SIGTERM ends a worker whose database went silent (packets dropped, nothing reset) within its
/// shutdown grace and a few seconds, instead of waiting for TCP to give up on its statements.
#[tokio::test]
async fn sigterm_ends_a_worker_whose_database_went_silent() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[worker]\nshutdown_grace = \"2s\"\n\
         [handlers.short]\ncommand = [\"sleep\", \"1\"]\n",
    );
    let relay = CutRelay::start(&db.url).await;
    db.exec("INSERT INTO job_queue (kind) VALUES ('short')")
        .await;
    let worker = spawn_worker(&relay.url(&db.url), &cfg, &dir);
    wait_until("the job running", Duration::from_secs(10), || async {
        db.states().await == "running=1"
    })
    .await;
    relay.blackhole();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked = Instant::now();
    kill(Pid::from_raw(worker.id() as i32), Signal::SIGTERM).unwrap();
    let out = tokio::task::spawn_blocking(move || wait_output(worker, Duration::from_secs(40)))
        .await
        .unwrap();
    let took = asked.elapsed();
    eprintln!("worker exited {took:?} after SIGTERM with its database silent");
    // At most: a claim in flight (5 s), the grace (2 s), the job's outcome (5 s after the grace), then
    // the closing steps side by side (5 s).
    assert!(
        took < Duration::from_secs(25),
        "took {took:?}; log in {}",
        dir.join("worker.log").display()
    );
    assert!(out.status.code().is_some(), "exited, was not killed");
    relay.heal();
    // The row is left to the reaper: its outcome could not be recorded.
    let (reaper_task, reaper_stop) = reaper(&db);
    wait_until("the row settled", Duration::from_secs(30), || async {
        let s = db.states().await;
        s == "done=1" || s == "queued=1"
    })
    .await;
    reaper_stop.cancel();
    reaper_task.await.unwrap().unwrap();
}
