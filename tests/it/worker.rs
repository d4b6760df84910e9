//! The worker: retries and backoff, dead jobs, timeouts, panics, shutdown, cron mode, the registry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use jobq::RetryPolicy;
use jobq::{CancellationToken, Handlers, JobContext, JobError, Mode, Worker, WorkerConfig};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sqlx::Row;

use crate::common::{
    TestDb, jobq, scratch_dir, spawn_forever_worker, wait_output, wait_until, write_config,
};

fn drain() -> WorkerConfig {
    WorkerConfig {
        mode: Mode::Drain,
        ..WorkerConfig::default()
    }
}

async fn run(db: &TestDb, handlers: Handlers, cfg: WorkerConfig) -> jobq::WorkerReport {
    db.worker(handlers)
        .pool(db.pool.clone())
        .config(|c| *c = cfg)
        .drain()
        .await
}

async fn job_row(db: &TestDb, id: u64) -> jobq::JobRecord {
    jobq::testing::get_job(&db.pool, id).await.unwrap()
}

#[tokio::test]
async fn a_failed_job_waits_with_exponential_backoff() {
    let db = TestDb::new().await;
    db.insert_jobs("flaky", 1).await;
    let handlers = Handlers::new()
        .register("flaky", |_job: JobContext| async {
            Err::<(), _>(JobError::retry("upstream said 503"))
        })
        .unwrap();
    let cfg = WorkerConfig {
        retry: RetryPolicy {
            base: Duration::from_secs(3600),
            cap: Duration::from_secs(7200),
        },
        ..drain()
    };
    let report = run(&db, handlers, cfg).await;
    assert_eq!((report.claimed, report.retried), (1, 1));
    let job = job_row(&db, 1).await;
    assert_eq!(job.state, jobq::State::Retry);
    assert_eq!(job.attempts, 1);
    assert_eq!(job.last_error.as_deref(), Some("upstream said 503"));
    assert!(job.claim.is_none());
    // First retry waits between half and all of the base (equal jitter).
    let wait: i64 = db
        .scalar("SELECT TIMESTAMPDIFF(SECOND, NOW(6), run_at) FROM job_queue")
        .await;
    assert!((1795..=3600).contains(&wait), "retry in {wait} s");
}

/// Whose `max_attempts` bounds a job: its own, even under a handler that says otherwise; else its
/// handler's (a plain-SQL INSERT leaves the column NULL); else 20. A failure writes the bound applied
/// into a row that had none.
#[tokio::test]
async fn a_jobs_own_max_attempts_wins_over_its_handlers_which_wins_over_twenty() {
    let db = TestDb::new().await;
    let own = jobq::enqueue(&db.pool, &jobq::NewJob::new("capped").max_attempts(1))
        .await
        .unwrap();
    db.exec("INSERT INTO job_queue (kind) VALUES ('capped'), ('plain')")
        .await;
    let calls = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let failing = |calls: &Arc<std::sync::Mutex<std::collections::BTreeMap<u64, u32>>>| {
        let calls = calls.clone();
        move |job: JobContext| {
            *calls.lock().unwrap().entry(job.id.0).or_insert(0) += 1;
            async { Err::<(), _>(JobError::retry("down")) }
        }
    };
    let handlers = Handlers::new()
        .register_with_options(
            "capped",
            failing(&calls),
            jobq::handler::HandlerOptions {
                max_attempts: Some(3),
                ..Default::default()
            },
        )
        .unwrap()
        .register("plain", failing(&calls))
        .unwrap();
    let cfg = WorkerConfig {
        retry: RetryPolicy {
            base: Duration::ZERO,
            cap: Duration::ZERO,
        },
        ..drain()
    };
    run(&db, handlers, cfg).await;
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls.into_iter().collect::<Vec<_>>(),
        [(own.0, 1), (own.0 + 1, 3), (own.0 + 2, 20)],
        "runs per job: its own 1, the handler's 3, the default 20"
    );
    let rows: Vec<(String, u16)> =
        sqlx::query_as("SELECT CAST(state AS CHAR), max_attempts FROM job_queue ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        [
            ("dead".to_string(), 1),
            ("dead".to_string(), 3),
            ("dead".to_string(), 20)
        ]
    );
}

#[tokio::test]
async fn a_job_that_keeps_failing_is_dead_after_max_attempts_with_its_last_error() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (kind, max_attempts) VALUES ('bad', 3)")
        .await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let handlers = Handlers::new()
        .register("bad", move |job: JobContext| {
            c.fetch_add(1, Ordering::SeqCst);
            async move { Err::<(), _>(JobError::retry(format!("failure #{}", job.attempt))) }
        })
        .unwrap();
    // A zero backoff makes each retry due at once, so one draining worker runs all three attempts.
    let cfg = WorkerConfig {
        retry: RetryPolicy {
            base: Duration::ZERO,
            cap: Duration::ZERO,
        },
        ..drain()
    };
    let report = run(&db, handlers, cfg).await;
    assert_eq!((report.retried, report.dead), (2, 1), "{report:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let job = job_row(&db, 1).await;
    assert_eq!(job.state, jobq::State::Dead);
    assert_eq!(job.attempts, 3);
    assert_eq!(job.last_error.as_deref(), Some("failure #3"));
    assert!(job.finished_at.is_some());
    // Every attempt is on record, with its error, its claimant and its start.
    let attempts = jobq::Jobs::new(db.pool.clone()).attempts(1).await.unwrap();
    let seen: Vec<(u16, &str, Option<&str>)> = attempts
        .iter()
        .map(|a| (a.attempt, a.outcome.as_str(), a.error.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (1, "retry", Some("failure #1")),
            (2, "retry", Some("failure #2")),
            (3, "dead", Some("failure #3"))
        ]
    );
    assert!(
        attempts
            .iter()
            .all(|a| a.claim.is_some() && a.started_at.is_some())
    );
}

#[tokio::test]
async fn fatal_errors_and_panics() {
    let db = TestDb::new().await;
    db.insert_jobs("fatal", 1).await;
    db.insert_jobs("panics", 1).await;
    let handlers = Handlers::new()
        .register("fatal", |_j: JobContext| async {
            Err::<(), _>(JobError::fatal("cannot parse invoice"))
        })
        .unwrap()
        .register("panics", |_j: JobContext| async {
            let v: Vec<u8> = Vec::new();
            if v.is_empty() {
                panic!("index out of range");
            }
            Ok::<(), JobError>(())
        })
        .unwrap();
    let cfg = WorkerConfig {
        retry: RetryPolicy {
            base: Duration::from_secs(600),
            cap: Duration::from_secs(600),
        },
        ..drain()
    };
    run(&db, handlers, cfg).await;
    let fatal = job_row(&db, 1).await;
    assert_eq!((fatal.state, fatal.attempts), (jobq::State::Dead, 1));
    let panicked = job_row(&db, 2).await;
    assert_eq!(panicked.state, jobq::State::Retry);
    assert_eq!(
        panicked.last_error.as_deref(),
        Some("handler panicked: index out of range")
    );
}

#[tokio::test]
async fn a_job_past_its_timeout_is_stopped_and_failed() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (kind, timeout_secs) VALUES ('slow', 1), ('stubborn', 1)")
        .await;
    let handlers = Handlers::new()
        // Honours cancellation.
        .register("slow", |job: JobContext| async move {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(60)) => Ok(()),
                () = job.cancelled() => Err(JobError::retry("stopped")),
            }
        })
        .unwrap()
        // Ignores it: the worker abandons it after cancel_grace.
        .register("stubborn", |_job: JobContext| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<(), JobError>(())
        })
        .unwrap();
    let cfg = WorkerConfig {
        cancel_grace: Duration::from_millis(300),
        retry: RetryPolicy {
            base: Duration::from_secs(600),
            cap: Duration::from_secs(600),
        },
        ..drain()
    };
    let started = Instant::now();
    run(&db, handlers, cfg).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    for id in [1, 2] {
        let job = job_row(&db, id).await;
        assert_eq!(job.state, jobq::State::Retry, "job {id}");
        assert_eq!(job.last_error.as_deref(), Some("timed out after 1s"));
    }
}

#[tokio::test]
async fn drain_mode_waits_for_running_jobs_and_runs_what_they_enqueue() {
    let db = TestDb::new().await;
    db.insert_jobs("parent", 3).await;
    let pool = db.pool.clone();
    let handlers = Handlers::new()
        .register("parent", move |job: JobContext| {
            let pool = pool.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let child = jobq::NewJob::new("child").payload(&job.id)?;
                jobq::enqueue(&pool, &child)
                    .await
                    .map_err(|e| JobError::retry(e.to_string()))?;
                Ok(())
            }
        })
        .unwrap()
        .register("child", |_j: JobContext| async { Ok::<(), JobError>(()) })
        .unwrap();
    let report = run(&db, handlers, drain()).await;
    assert_eq!((report.claimed, report.done), (6, 6));
    assert_eq!(db.states().await, "done=6");
}

/// Rows taken away while their jobs run (reset by a reaper that misjudged the worker, then claimed by
/// someone else or again by this worker) must not be finished by the old attempt, even when their
/// finishes travel in one batch with finishes that do count.
#[tokio::test]
async fn batched_finishes_skip_exactly_the_rows_taken_away() {
    let db = TestDb::new().await;
    db.insert_jobs("steal", 30).await;
    let gate = Arc::new(tokio::sync::Barrier::new(30));
    let pool = db.pool.clone();
    let handlers = Handlers::new()
        .register("steal", move |job: JobContext| {
            let (pool, gate) = (pool.clone(), gate.clone());
            async move {
                let taken = match job.id.0 % 3 {
                    0 => "UPDATE job_queue SET claim = 'someone-else' WHERE id = ?",
                    1 => "UPDATE job_queue SET attempts = attempts + 1 WHERE id = ?",
                    _ => "DO ?",
                };
                sqlx::query(taken)
                    .bind(job.id)
                    .execute(&pool)
                    .await
                    .unwrap();
                // All thirty end together, so their finishes share batches.
                gate.wait().await;
                Ok::<(), JobError>(())
            }
        })
        .unwrap();
    let cfg = WorkerConfig {
        concurrency: 30,
        batch_size: 30,
        ..drain()
    };
    let report = run(&db, handlers, cfg).await;
    assert_eq!((report.claimed, report.done, report.lost), (30, 10, 20));
    let rows: Vec<(u64, String, Option<String>, u16)> = sqlx::query_as(
        "SELECT id, CAST(state AS CHAR), CAST(claim AS CHAR), attempts FROM job_queue ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for (id, state, claim, attempts) in rows {
        match id % 3 {
            0 => assert_eq!(
                (state.as_str(), claim.as_deref(), attempts),
                ("running", Some("someone-else"), 1),
                "job {id}"
            ),
            1 => assert_eq!(
                (state.as_str(), attempts),
                ("running", 2),
                "job {id}: a later attempt is not finished by an earlier one"
            ),
            _ => assert_eq!(
                (state.as_str(), claim, attempts),
                ("done", None, 1),
                "job {id}"
            ),
        }
    }
}

#[tokio::test]
async fn shutdown_lets_running_jobs_finish_then_hands_back_what_outlives_the_grace() {
    let db = TestDb::new().await;
    db.insert_jobs("quick", 2).await;
    // The second long job has no attempt left after this one.
    db.exec("INSERT INTO job_queue (kind, max_attempts) VALUES ('long', 20), ('long', 1)")
        .await;
    let handlers = Handlers::new()
        .register("quick", |_j: JobContext| async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            Ok::<(), JobError>(())
        })
        .unwrap()
        .register("long", |job: JobContext| async move {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(60)) => Ok(()),
                () = job.cancelled() => Err(JobError::retry("stopped")),
            }
        })
        .unwrap();
    let worker = db
        .worker(handlers)
        .pool(db.pool.clone())
        .config(|c| c.shutdown_grace = Duration::from_millis(1500))
        .start()
        .await;
    wait_until("4 jobs running", Duration::from_secs(10), || async {
        db.states().await == "running=4"
    })
    .await;
    let report = worker.stop().await;
    assert_eq!((report.done, report.released), (2, 2));
    let rows = sqlx::query(
        "SELECT kind, state, attempts, max_attempts, last_error, claim FROM job_queue ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for r in rows {
        let kind = String::from_utf8(r.get("kind")).unwrap();
        let state = String::from_utf8(r.get("state")).unwrap();
        assert!(r.get::<Option<Vec<u8>>, _>("claim").is_none());
        if kind == "quick" {
            assert_eq!(state, "done");
        } else if r.get::<u16, _>("max_attempts") == 1 {
            // The same rule as a reset after a crash: the interrupted attempt was its last.
            assert_eq!(state, "dead", "no attempt left");
            assert_eq!(r.get::<u16, _>("attempts"), 1);
        } else {
            assert_eq!(state, "queued", "an interrupted job is runnable again");
            assert_eq!(r.get::<u16, _>("attempts"), 1);
            let err: Option<String> = r.get("last_error");
            assert!(err.unwrap().contains("interrupted"));
        }
    }
    let registered: i64 = db.scalar("SELECT COUNT(*) FROM jobq_processes").await;
    assert_eq!(registered, 0, "a clean exit removes the registry row");
}

#[tokio::test]
async fn an_idle_forever_worker_picks_up_a_new_job_within_its_poll_interval() {
    let db = TestDb::new().await;
    let handlers = Handlers::new()
        .register("ping", |_j: JobContext| async { Ok::<(), JobError>(()) })
        .unwrap();
    let poll = Duration::from_millis(500);
    let worker = db
        .worker(handlers)
        .pool(db.pool.clone())
        .config(|c| {
            c.poll_interval = poll;
            c.heartbeat_interval = Duration::from_millis(100);
        })
        .start()
        .await;
    // Registered, and heartbeating while idle.
    wait_until("registry row", Duration::from_secs(5), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_processes WHERE role = 'worker'")
            .await
            == 1
    })
    .await;
    let first: i64 = db
        .scalar("SELECT CAST(UNIX_TIMESTAMP(heartbeat_at) * 1000 AS SIGNED) FROM jobq_processes")
        .await;
    worker
        .signals
        .wait_until("its longest idle wait", Duration::from_secs(10), |c| {
            c.idle_wait >= poll
        })
        .await;
    wait_until("the heartbeat advanced", Duration::from_secs(5), || async {
        let later: i64 = db
            .scalar(
                "SELECT CAST(UNIX_TIMESTAMP(heartbeat_at) * 1000 AS SIGNED) FROM jobq_processes",
            )
            .await;
        later > first
    })
    .await;

    let t0 = Instant::now();
    db.insert_jobs("ping", 1).await;
    wait_until("job done", Duration::from_secs(5), || async {
        db.states().await == "done=1"
    })
    .await;
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "picked up after {:?}",
        t0.elapsed()
    );
    worker.stop().await;
}

/// A due row that another transaction holds locked looks due to the idle wait's non-locking probe but
/// cannot be claimed. The worker must back off rather than spin between the two, and run the job once the
/// lock goes.
#[tokio::test]
async fn a_due_job_locked_by_another_transaction_does_not_make_the_worker_spin() {
    let db = TestDb::new().await;
    db.insert_jobs("held", 1).await;
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM job_queue FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();

    let opts: sqlx::mysql::MySqlConnectOptions = db.url.parse().unwrap();
    let relay = crate::wire::Relay::start(opts.get_host().to_string(), opts.get_port())
        .await
        .unwrap();
    let pool = jobq::connect(
        &jobq::ConnectConfig::new(relay.url(&db.url))
            .unwrap()
            .max_connections(4),
    )
    .await
    .unwrap();
    let ran = Arc::new(AtomicU32::new(0));
    let counter = ran.clone();
    let handlers = Handlers::new()
        .register("held", move |_job: JobContext| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<(), JobError>(())
            }
        })
        .unwrap();
    let worker = db.worker(handlers).pool(pool.clone()).start().await;

    // Past its start-up (registration, the first claim), count what it sends for a while.
    worker
        .signals
        .wait_until("the first claim", Duration::from_secs(10), |c| {
            c.claims >= 1
        })
        .await;
    let before = relay.commands();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = relay.commands().round_trips() - before.round_trips();
    let ran_while_locked = ran.load(Ordering::SeqCst);
    // Let go of the lock before asserting: a failing test must not leave it held (the test database
    // could not be dropped).
    holder.rollback().await.unwrap();
    assert_eq!(ran_while_locked, 0, "the row was locked");
    // Spinning is thousands a second; backing off is a handful.
    assert!(
        sent < 100,
        "{sent} commands in 2 s while the only due row was locked"
    );

    wait_until(
        "the job to run once the lock is gone",
        Duration::from_secs(5),
        || {
            let ran = ran.clone();
            async move { ran.load(Ordering::SeqCst) == 1 }
        },
    )
    .await;
    worker.stop().await;
    pool.close().await;
}

/// A claim locks only rows of what it picked without locks, the first due rows. When another
/// transaction holds every one of those, a draining worker must still claim the due rows behind them
/// (the walk past held rows) rather than stop with work left it could run.
#[tokio::test]
async fn a_draining_worker_claims_past_the_rows_others_hold() {
    let db = TestDb::new().await;
    db.insert_jobs("held", 100).await;
    // Well past what one claim of the defaults picks (10 rows, picked four times over).
    let mut holder = db.pool.begin().await.unwrap();
    let held: Vec<u64> =
        sqlx::query_scalar("SELECT id FROM job_queue ORDER BY id LIMIT 60 FOR UPDATE")
            .fetch_all(&mut *holder)
            .await
            .unwrap();
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = ran.clone();
    let handlers = Handlers::new()
        .register("held", move |job: JobContext| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(job.id.0);
                Ok::<(), JobError>(())
            }
        })
        .unwrap();
    let cfg = WorkerConfig {
        mode: Mode::Drain,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(db.pool.clone(), handlers, cfg).unwrap();
    let drained = tokio::time::timeout(
        Duration::from_secs(20),
        worker.run(CancellationToken::new()),
    )
    .await;
    let ran = ran.lock().unwrap().clone();
    holder.rollback().await.unwrap();
    drained
        .unwrap_or_else(|_| panic!("the worker did not drain within 20 s; it ran {}", ran.len()))
        .expect("the worker ended without an error");
    assert_eq!(ran.len(), 40, "ran {ran:?}");
    assert!(
        ran.iter().all(|id| !held.contains(id)),
        "ran a held row: {ran:?}"
    );
}

fn sh_config(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    write_config(
        dir,
        &format!(
            "[worker]\nheartbeat_interval = \"200ms\"\n{extra}\n\
             [handlers.nap]\ncommand = [\"sh\", \"-c\", \"sleep $(cat)\"]\n\
             [handlers.log]\ncommand = [\"sh\", \"-c\", \"echo $JOBQ_JOB_ID >> {}/ids\"]\n",
            dir.display()
        ),
    )
}

#[tokio::test]
async fn sigterm_lets_the_binarys_running_jobs_finish_and_exits_0() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = sh_config(&dir, "shutdown_grace = \"20s\"");
    db.exec(
        "INSERT INTO job_queue (kind, payload) VALUES ('nap', '1'), ('nap', '1'), ('nap', '1')",
    )
    .await;
    let child = spawn_forever_worker(&db, &cfg);
    let pid = Pid::from_raw(child.id() as i32);
    wait_until("3 jobs running", Duration::from_secs(10), || async {
        db.states().await == "running=3"
    })
    .await;
    let registered: u32 = db
        .scalar("SELECT pid FROM jobq_processes WHERE role = 'worker'")
        .await;
    assert_eq!(registered, child.id());
    kill(pid, Signal::SIGTERM).unwrap();
    let out = wait_output(child.take(), Duration::from_secs(15));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert_eq!(db.states().await, "done=3", "{stderr}");
    let registered: i64 = db.scalar("SELECT COUNT(*) FROM jobq_processes").await;
    assert_eq!(registered, 0);
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = sh_config(&dir, "shutdown_grace = \"60s\"");
    db.exec("INSERT INTO job_queue (kind, payload) VALUES ('nap', '30')")
        .await;
    let mut child = spawn_forever_worker(&db, &cfg);
    let pid = Pid::from_raw(child.id() as i32);
    // Its log, read to the end; `taken` says when the first signal has been taken.
    let (taken, first_taken) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("waiting for running jobs") {
                let _ = taken.send(());
            }
        }
    });
    wait_until("job running", Duration::from_secs(10), || async {
        db.states().await == "running=1"
    })
    .await;
    kill(pid, Signal::SIGTERM).unwrap();
    tokio::task::spawn_blocking(move || first_taken.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the worker took the first signal: it waits for its running job");
    let t0 = Instant::now();
    kill(pid, Signal::SIGINT).unwrap();
    let out = wait_output(child.take(), Duration::from_secs(5));
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(out.status.code(), Some(130));
    // The claim stays on the row: recovering it is the reaper's job.
    assert_eq!(db.states().await, "running=1");
}

#[tokio::test]
async fn cron_mode_workers_started_together_drain_the_queue_and_all_exit_0() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = sh_config(&dir, "concurrency = 4");
    db.insert_jobs("log", 300).await;
    let children: Vec<_> = (0..4)
        .map(|_| {
            jobq(
                Some(&db.url),
                &["worker", "--config", cfg.to_str().unwrap()],
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for child in children {
        let out = wait_output(child, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(db.states().await, "done=300");
    let ids = std::fs::read_to_string(dir.join("ids")).unwrap();
    let mut ids: Vec<u64> = ids.lines().map(|l| l.parse().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=300).collect::<Vec<u64>>(),
        "each job ran exactly once"
    );
}
