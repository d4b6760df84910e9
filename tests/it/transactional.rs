//! Transactional completion: an SQL handler with `transactional = true` commits its statement and the
//! job's fenced done finish together, so its effects happen exactly once, whatever happens to workers
//! and their connections.
//!
//! The effect rows are the evidence of exactly once. Handler copies may still run more than once: what
//! happened is also checked as one history (`history::check`), so that every copy run again belongs to
//! a worker the test killed or a row it took away, or is the retry of a failure its worker recorded
//! (a killed session).

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{
    HEAVY, KillOnDrop, TestDb, jobq, scratch_dir, wait_output, wait_until, write_config,
};
use crate::history::{self, At, Expectations, History, assert_clean};

const JOBS: i64 = 1200;

fn spawn_worker(db: &TestDb, cfg: &std::path::Path, log: &std::path::Path) -> Child {
    jobq(
        Some(&db.url),
        &[
            "worker",
            "--forever",
            "--config",
            cfg.to_str().unwrap(),
            "--concurrency",
            "8",
        ],
    )
    .stdout(Stdio::null())
    .stderr(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap(),
    )
    .spawn()
    .unwrap()
}

/// A drain under fire: three workers (and a reaper) run 1,200 jobs whose procedure inserts an effect
/// row and then works 20 ms more, while every 300 ms one of them is SIGKILLed and restarted or one of
/// their database sessions is killed. Every job ends done with exactly one effect row: no effect lost
/// with a killed attempt, none doubled by a retry. (With `transactional = false` the same drain leaves
/// duplicates: see the note in the README.) Each copy also records its start and end in a table that
/// a rollback does not reach, and whether an earlier copy of its job still ran on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_happen_exactly_once_while_workers_and_sessions_are_killed() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE effects (job_id BIGINT NOT NULL) ENGINE = InnoDB")
        .await;
    db.exec(&history::effects_table_kept_on_rollback("copies"))
        .await;
    // The effect first, then 20 ms more work: without the transaction, the effect is committed for
    // the whole of that time before the job's finish, and a kill then makes the retry write it again.
    db.exec(&history::recorded_procedure(
        "effect",
        "copies",
        "INSERT INTO effects (job_id) VALUES (p_job); DO SLEEP(0.02);",
        true,
    ))
    .await;
    db.exec(&format!(
        "INSERT INTO job_queue (kind, payload) SELECT 'effect', JSON_OBJECT('id', seq) \
         FROM seq_1_to_{JOBS}"
    ))
    .await;
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[handlers.effect]\n\
         sql = \"CALL effect(?, ?, ?)\"\n\
         params = [\"$job_id\", \"$claim\", \"$attempt\"]\n\
         transactional = true\n",
    );
    let h = drain_under_fire(&db, &cfg, &dir, Some("copies")).await;
    let missing = h.jobs_without_a_whole_copy();
    assert!(missing.is_empty(), "done without a whole copy: {missing:?}");
}

/// Drains the `JOBS` effect jobs already queued with three `jobq worker`s on `cfg` and a reaper, while
/// every 300 ms for 8 s one worker is SIGKILLed and restarted or one session in the test's database is
/// killed (a worker's claim, finish or heartbeat, a statement in the middle of a transaction, or the
/// application's own). Asserts that every job ended done with exactly one row in `effects`, and that
/// the history is clean: the SIGKILLed workers are the claimants lost, and a copy a killed session cut
/// short failed and was recorded so (a retry, not a duplicate). `copies` names the table a procedure records its copies in
/// ([`history::recorded_procedure`]); without one (an application behind HTTP or a process handler)
/// the history holds what the rows and `jobq_attempts` record, and the effect rows are the evidence.
async fn drain_under_fire(
    db: &TestDb,
    cfg: &std::path::Path,
    dir: &std::path::Path,
    copies: Option<&str>,
) -> History {
    let _heavy = HEAVY.acquire().await.unwrap();
    let log = dir.join("workers.log");
    let mut workers: Vec<KillOnDrop> = (0..3)
        .map(|_| KillOnDrop::new(spawn_worker(db, cfg, &log)))
        .collect();
    let mut reaper = KillOnDrop::new(
        jobq(Some(&db.url), &["reaper", "--interval", "200ms"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("reaper.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    // The chaos runs on a connection of its own, and what follows it reads through a pool opened after
    // it: a killed session may be an idle one of the test's own pools (they are sessions in the test's
    // database too), and a pool hands out an idle connection without a ping.
    let chaos = db.pool(1).await;
    let mut expect = Expectations::no_faults();
    let (mut sigkills, mut session_kills) = (0, 0);
    let chaos_until = Instant::now() + Duration::from_secs(8);
    let mut round = 0u32;
    while Instant::now() < chaos_until {
        tokio::time::sleep(Duration::from_millis(300)).await;
        round += 1;
        if round.is_multiple_of(2) {
            let i = rand::random::<u32>() as usize % workers.len();
            // Read before the kill; a worker not registered yet has claimed nothing.
            if let Some(token) = history::worker_token_of(&chaos, workers[i].id()).await {
                expect = expect.lost(&token);
            }
            let _ = workers[i].kill();
            let _ = workers[i].wait();
            workers[i] = KillOnDrop::new(spawn_worker(db, cfg, &log));
            sigkills += 1;
        } else {
            // Any session in the test's database but this one: a worker's claim, finish, heartbeat or
            // a statement in the middle of its transaction.
            // One connection for both statements, so "this one" is the one that kills.
            let Ok(mut conn) = chaos.acquire().await else {
                continue;
            };
            let ids: Vec<i64> = sqlx::query_scalar(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() \
                 AND ID <> CONNECTION_ID()",
            )
            .fetch_all(&mut *conn)
            .await
            .unwrap();
            if let Some(id) = ids.get(rand::random::<u32>() as usize % ids.len().max(1)) {
                let _ = sqlx::query(&format!("KILL CONNECTION {id}"))
                    .execute(&mut *conn)
                    .await;
                session_kills += 1;
            }
        }
    }
    let after = db.pool(2).await;
    let count = |sql: &'static str| {
        let after = after.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&after)
                .await
                .unwrap()
        }
    };
    wait_until("every job done", Duration::from_secs(90), || async {
        count("SELECT COUNT(*) FROM job_queue WHERE state = 'done'").await == JOBS
    })
    .await;
    for w in &workers {
        kill(Pid::from_raw(w.id() as i32), Signal::SIGTERM).unwrap();
    }
    kill(Pid::from_raw(reaper.id() as i32), Signal::SIGTERM).unwrap();
    for w in workers {
        wait_output(w.take(), Duration::from_secs(30));
    }
    let _ = reaper.wait();
    let effects = count("SELECT COUNT(*) FROM effects").await;
    let distinct = count("SELECT COUNT(DISTINCT job_id) FROM effects").await;
    let retried = count("SELECT COUNT(*) FROM job_queue WHERE attempts > 1").await;
    eprintln!(
        "{sigkills} workers SIGKILLed, {session_kills} sessions killed; {retried} jobs needed more \
         than one attempt; {effects} effect rows for {distinct} jobs"
    );
    assert!(sigkills >= 5 && session_kills >= 5);
    assert_eq!((effects, distinct), (JOBS, JOBS), "effects lost or doubled");
    let mut h = History::default();
    if let Some(table) = copies {
        h.read_sql_effects(&after, table).await;
    }
    h.read_database(&after).await;
    let summary = assert_clean(&h, &expect);
    eprintln!("{summary:?}");
    assert_eq!((summary.jobs, summary.done), (JOBS as usize, JOBS as usize));
    h
}

/// A library handler finishes its job inside its own transaction (`JobContext::finish_in`). When the
/// claim was taken away meanwhile (here: the row reset as a reaper would) the finish says so, the
/// handler rolls back, and the next attempt writes the one effect.
#[tokio::test]
async fn a_library_handler_commits_its_effect_with_the_finish_or_not_at_all() {
    use jobq::{Handlers, JobContext, JobError};
    use sqlx::Connection;
    let db = TestDb::new().await;
    db.exec("CREATE TABLE effects (job_id BIGINT NOT NULL) ENGINE = InnoDB")
        .await;
    db.exec("INSERT INTO job_queue (kind) VALUES ('effect')")
        .await;
    let pool = db.pool(4).await;
    let copies = history::LibraryCopies::new();
    let recorder = copies.clone();
    let handlers = Handlers::new()
        .register("effect", move |job: JobContext| {
            let pool = pool.clone();
            let recorder = recorder.clone();
            async move {
                let copy = recorder.start(&job);
                let mut conn = pool
                    .acquire()
                    .await
                    .map_err(|e| JobError::retry(e.to_string()))?;
                let mut tx = conn
                    .begin()
                    .await
                    .map_err(|e| JobError::retry(e.to_string()))?;
                sqlx::query("INSERT INTO effects (job_id) VALUES (?)")
                    .bind(job.id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| JobError::retry(e.to_string()))?;
                if job.attempt == 1 {
                    // The first attempt loses its claim before it commits.
                    sqlx::query("UPDATE job_queue SET state = 'queued', claim = NULL WHERE id = ?")
                        .bind(job.id.0)
                        .execute(&pool)
                        .await
                        .map_err(|e| JobError::retry(e.to_string()))?;
                }
                if !job
                    .finish_in(&mut tx)
                    .await
                    .map_err(|e| JobError::retry(e.to_string()))?
                {
                    tx.rollback()
                        .await
                        .map_err(|e| JobError::retry(e.to_string()))?;
                    return Err(JobError::retry("claim lost; rolled back"));
                }
                tx.commit()
                    .await
                    .map_err(|e| JobError::retry(e.to_string()))?;
                copy.ended();
                Ok(())
            }
        })
        .unwrap();
    let report = db.worker(handlers).drain().await;
    let effects: i64 = db.scalar("SELECT COUNT(*) FROM effects").await;
    let (state, attempts): (String, i64) =
        sqlx::query_as("SELECT CAST(state AS CHAR), CAST(attempts AS SIGNED) FROM job_queue")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), attempts, effects), ("done", 2, 1));
    assert_eq!((report.done, report.lost), (1, 1), "{report:?}");
    // Attempt 1's copy ran again because the test took its row away, and ended before attempt 2's
    // began.
    let mut h = History::default();
    h.read_library_copies(&copies);
    h.read_database(&db.pool).await;
    let summary = assert_clean(&h, &Expectations::no_faults().taken(1, 1));
    assert_eq!((summary.copies, summary.rerun), (2, 1), "{}", h.timeline(1));
    assert!(
        h.copies(1)[1].ran_to_end,
        "the second copy committed:\n{}",
        h.timeline(1)
    );
}

/// Any application can finish its job in its own transaction with `CALL jobq_finish(id, claim,
/// attempt)` (schema 21) and say so through its handler (`JobContext::finished_by_application`). Here
/// the "application" is a library handler speaking plain SQL. Its first attempt writes its effect,
/// calls the procedure and rolls back, yet answers that it finished: the worker reads the row, finds
/// it still running under the claim, and fails the attempt saying why. Its second attempt commits the
/// effect with the finish. A stale claim gets `finished = 0` and changes nothing. The job that waits
/// for it is released, and the effect is there once.
#[tokio::test]
async fn an_application_finishes_its_job_with_the_procedure_and_the_worker_checks_its_word() {
    use jobq::{Handlers, JobContext, JobError, NewJob, RetryPolicy};
    use sqlx::Connection;
    let db = TestDb::new().await;
    db.exec("CREATE TABLE effects (job_id BIGINT NOT NULL) ENGINE = InnoDB")
        .await;
    let parent = jobq::enqueue(&db.pool, &NewJob::new("effect"))
        .await
        .unwrap();
    let child = jobq::enqueue(&db.pool, &NewJob::new("after").after([parent]))
        .await
        .unwrap();
    let pool = db.pool(4).await;
    let err = |e: sqlx::Error| JobError::retry(e.to_string());
    let handlers = Handlers::new()
        .register("effect", move |job: JobContext| {
            let pool = pool.clone();
            async move {
                let mut conn = pool.acquire().await.map_err(err)?;
                // A claim that is not the job's changes nothing.
                let stale: (i64,) = sqlx::query_as("CALL jobq_finish(?, ?, ?)")
                    .bind(job.id.0)
                    .bind("someone-else")
                    .bind(job.attempt)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(err)?;
                assert_eq!(stale.0, 0);
                let mut tx = conn.begin().await.map_err(err)?;
                sqlx::query("INSERT INTO effects (job_id) VALUES (?)")
                    .bind(job.id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(err)?;
                let (finished,): (i64,) = sqlx::query_as("CALL jobq_finish(?, ?, ?)")
                    .bind(job.id.0)
                    .bind(&job.claim)
                    .bind(job.attempt)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(err)?;
                assert_eq!(finished, 1, "the claim holds");
                if job.attempt == 1 {
                    tx.rollback().await.map_err(err)?;
                } else {
                    tx.commit().await.map_err(err)?;
                }
                job.finished_by_application();
                Ok(())
            }
        })
        .unwrap()
        .register("after", |_job: JobContext| async { Ok(()) })
        .unwrap();
    let worker = db
        .worker(handlers)
        .config(|c| {
            c.poll_interval = Duration::from_millis(20);
            c.retry = RetryPolicy {
                base: Duration::from_millis(10),
                cap: Duration::from_millis(10),
            };
        })
        .start()
        .await;
    wait_until("the dependent done", Duration::from_secs(20), || async {
        db.scalar::<i64>(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND state = 'done'",
            child.0
        ))
        .await
            == 1
    })
    .await;
    let report = worker.stop().await;
    let effects: i64 = db.scalar("SELECT COUNT(*) FROM effects").await;
    let (state, attempts, error): (String, i64, Option<String>) = sqlx::query_as(
        "SELECT CAST(state AS CHAR), CAST(attempts AS SIGNED), last_error FROM job_queue WHERE id = ?",
    )
    .bind(parent.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((state.as_str(), attempts, effects), ("done", 2, 1));
    let error = error.unwrap_or_default();
    assert!(
        error.contains("still carries this attempt's claim") && error.contains("jobq_finish"),
        "{error}"
    );
    let child_state: String =
        sqlx::query_scalar("SELECT CAST(state AS CHAR) FROM job_queue WHERE id = ?")
            .bind(child.0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(child_state, "done", "the dependent was released and ran");
    assert_eq!((report.done, report.retried), (2, 1), "{report:?}");
}

/// A fresh database with an `effects` table (one row per effect a job writes) and the jobs `jobs`
/// inserts.
async fn effect_db(jobs: &str) -> TestDb {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE effects (job_id BIGINT NOT NULL) ENGINE = InnoDB")
        .await;
    db.exec(jobs).await;
    db
}

/// One effect job that works for 1.5 s after writing its row.
const LINGERING_JOB: &str =
    "INSERT INTO job_queue (kind, payload) VALUES ('effect', '{\"linger\": 1.5}')";

/// The Python interpreter with PyMySQL the suite uses (scripts/ensure-languages.sh).
fn python() -> String {
    std::env::var("JOBQ_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into())
}

/// An application behind an HTTP handler (tests/programs/effect_app.py, Python with PyMySQL): started
/// on a free port; its stdout lines come through `lines`.
struct App {
    child: Child,
    url: String,
    lines: std::sync::mpsc::Receiver<String>,
}

impl App {
    fn start(db: &TestDb, mode: &str) -> App {
        use std::io::BufRead;
        let program = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/effect_app.py");
        let mut child = std::process::Command::new(python())
            .args([program, &db.url, mode])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Python application (scripts/ensure-languages.sh installs Python)");
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let port = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the application prints its port");
        App {
            child,
            url: format!("http://127.0.0.1:{port}/effect"),
            lines,
        }
    }

    /// Waits for the application to say it began a job.
    fn began(&self) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .expect("the application begins a job");
            if line.starts_with("begin ") {
                return line;
            }
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The drain under fire of the SQL handler above, with the effect written by an application in another
/// language behind an HTTP handler: it writes the row and calls `jobq_finish` in one transaction, and
/// answers `{"finished": true}`. The application's own sessions are among those killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_application_that_finishes_in_its_transaction_has_each_effect_once_under_fire() {
    let db = effect_db(&format!(
        "INSERT INTO job_queue (kind) SELECT 'effect' FROM seq_1_to_{JOBS}"
    ))
    .await;
    let app = App::start(&db, "transactional");
    let dir = scratch_dir();
    let cfg = write_config(&dir, &format!("[handlers.effect]\nurl = \"{}\"\n", app.url));
    drain_under_fire(&db, &cfg, &dir, None).await;
}

/// The same application and one job that works for a while after writing its row, whose worker is
/// SIGKILLed meanwhile. Committing the row before answering (`plain`) leaves two rows once the reaper
/// hands the job on; finishing in the row's transaction leaves one, whichever attempt's commit wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_doubles_an_http_effect_unless_the_application_finishes_in_its_transaction()
{
    for (mode, want) in [("plain", 2), ("transactional", 1)] {
        let db = effect_db(LINGERING_JOB).await;
        let app = App::start(&db, mode);
        let dir = scratch_dir();
        let cfg = write_config(&dir, &format!("[handlers.effect]\nurl = \"{}\"\n", app.url));
        let effects = kill_the_first_worker_mid_job(&db, &cfg, &dir, None, || async {
            let began = app.began();
            assert!(began.ends_with(" 1"), "{began}");
        })
        .await;
        assert_eq!(effects, want, "{mode}: effect rows");
    }
}

/// Runs the one job of `db` under a `jobq worker` on `cfg`, SIGKILLs that worker once `started` says
/// the job's effect row is written, and lets a second worker and a reaper see the job done. Returns
/// the effect rows then. (A first attempt still running in the application can only roll back: the
/// row it wrote before `started` was committed or was not, and nothing else of it can commit.)
///
/// The history must be clean with the killed worker as the claimant lost. `copies` is the file a
/// process handler's program records its copies in: a program dies with its worker (within 1 s), and
/// the job's second copy is the one that ran to its end. An HTTP application's copies are not jobq's
/// to stop (it may run on after the request was dropped; docs/http-handlers.md), so for those the rows
/// and the effect rows are the evidence.
async fn kill_the_first_worker_mid_job<F, Fut>(
    db: &TestDb,
    cfg: &std::path::Path,
    dir: &std::path::Path,
    copies: Option<&std::path::Path>,
    started: F,
) -> i64
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let log = dir.join("workers.log");
    let mut first = spawn_worker(db, cfg, &log);
    started().await;
    let killed = history::sole_worker_token(&db.pool).await;
    first.kill().unwrap();
    first.wait().unwrap();
    // When the killed copy was seen gone: its program's process is dead.
    let mut gone_at = None;
    if let Some(file) = copies {
        let mut h = History::default();
        h.read_effects_file(file);
        let pid = h.copies(1)[0].pid;
        wait_until(
            "the program gone with its worker",
            Duration::from_secs(1),
            || async {
                jobq::testing::local_process(pid, None) == jobq::testing::ProcessState::Dead
            },
        )
        .await;
        gone_at = Some(At::now());
    }
    let second = spawn_worker(db, cfg, &log);
    let mut reaper = jobq(Some(&db.url), &["reaper", "--interval", "200ms"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("reaper.log")).unwrap())
        .spawn()
        .unwrap();
    wait_until("the job done", Duration::from_secs(60), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'done'")
            .await
            == 1
    })
    .await;
    kill(Pid::from_raw(second.id() as i32), Signal::SIGTERM).unwrap();
    wait_output(second, Duration::from_secs(30));
    let _ = reaper.kill();
    let _ = reaper.wait();
    let mut h = History::default();
    if let (Some(file), Some(at)) = (copies, gone_at) {
        h.read_effects_file(file);
        h.saw_gone(1, 1, at);
    }
    h.read_database(&db.pool).await;
    let summary = assert_clean(&h, &Expectations::no_faults().lost(&killed));
    if copies.is_some() {
        let c = h.copies(1);
        assert_eq!((summary.copies, summary.rerun), (2, 1), "{}", h.timeline(1));
        assert!(
            !c[0].ran_to_end && c[1].ran_to_end,
            "the killed copy never finished, the second did:\n{}",
            h.timeline(1)
        );
    }
    db.scalar("SELECT COUNT(*) FROM effects").await
}

/// The `[handlers.effect]` entry of a process handler running tests/programs/effect_worker.py (on the
/// reference Python worker) in `mode`; `begun`: the file it notes each written row in; `copies`: the
/// file each copy records its start and end in, for a history.
fn effect_process(
    db: &TestDb,
    mode: &str,
    begun: Option<&std::path::Path>,
    copies: Option<&std::path::Path>,
) -> String {
    let program = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/programs/effect_worker.py"
    );
    let mut argv = vec![
        python(),
        program.to_string(),
        db.url.clone(),
        mode.to_string(),
    ];
    // The program takes them by position: `copies` only after `begun`.
    assert!(copies.is_none() || begun.is_some(), "copies without begun");
    argv.extend(
        [begun, copies]
            .into_iter()
            .flatten()
            .map(|f| f.display().to_string()),
    );
    let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[handlers.effect]\nprocess = [{}]\nprocesses = 8\n",
        argv.join(", ")
    )
}

/// The drain under fire with the effect written by a long-lived Python program behind a process
/// handler, which writes the row and calls `jobq_finish` in one transaction and answers that it
/// finished the job. A SIGKILLed worker takes its programs down with it; their sessions are among those
/// killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_worker_that_finishes_in_its_transaction_has_each_effect_once_under_fire() {
    let db = effect_db(&format!(
        "INSERT INTO job_queue (kind) SELECT 'effect' FROM seq_1_to_{JOBS}"
    ))
    .await;
    let dir = scratch_dir();
    let cfg = write_config(&dir, &effect_process(&db, "transactional", None, None));
    drain_under_fire(&db, &cfg, &dir, None).await;
}

/// One job that works for a while after writing its row, and its worker SIGKILLed meanwhile (its
/// program dies with it). Committing the row at once (`plain`) leaves two rows once the reaper hands the
/// job on; writing it in the transaction that finishes the job leaves one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_doubles_a_process_effect_unless_the_program_finishes_in_its_transaction() {
    for (mode, want) in [("plain", 2), ("transactional", 1)] {
        let db = effect_db(LINGERING_JOB).await;
        let dir = scratch_dir();
        let (begun, copies) = (dir.join("begun"), dir.join("copies"));
        let cfg = write_config(
            &dir,
            &effect_process(&db, mode, Some(&begun), Some(&copies)),
        );
        let read_begun = || std::fs::read_to_string(&begun).unwrap_or_default();
        let effects = kill_the_first_worker_mid_job(&db, &cfg, &dir, Some(&copies), || {
            wait_until(
                "the first attempt begins",
                Duration::from_secs(30),
                || async { read_begun().lines().count() == 1 },
            )
        })
        .await;
        assert_eq!(effects, want, "{mode}: effect rows ({})", read_begun());
    }
}
