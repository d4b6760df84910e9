//! Process handlers through the real `jobq worker`: the pool's failure classes, outcomes, recycling,
//! death with the worker, cancel, config errors, and the four reference workers of `clients/`.
//!
//! The programs are the demo files of `tests/process/`, each serving a few kinds through its
//! language's reference worker. Interpreters come from `JOBQ_PYTHON`, `JOBQ_NODE`, `JOBQ_PHP` and
//! `JOBQ_RUBY` (the test script sets them), else `/usr/bin/{python3,node,php,ruby}`.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use jobq::config::Config;
use jobq::{CancellationToken, JobRecord, Reaper, ReaperConfig, State};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sqlx::Executor;

use crate::common::{TestDb, jobq, scratch_dir, wait_output, wait_until, write_config};
use crate::history::{self, At, History};

/// The interpreter of a language: its `JOBQ_*` variable, else the system one. `None` (with a SKIPPED
/// line) only when the variable is unset and the system one is missing.
fn interpreter(var: &str, default: &str) -> Option<String> {
    if let Ok(p) = std::env::var(var) {
        return Some(p);
    }
    if Path::new(default).exists() {
        return Some(default.to_string());
    }
    eprintln!("SKIPPED: {default} is not installed and {var} is not set");
    None
}

fn python() -> Option<String> {
    interpreter("JOBQ_PYTHON", "/usr/bin/python3")
}

fn demo(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/process")
        .join(file)
        .to_string_lossy()
        .into_owned()
}

/// A TOML array of strings.
fn toml_list(items: &[&str]) -> String {
    serde_json::to_string(items).unwrap()
}

/// Failed jobs come back after an hour, so each runs once here.
const BASE: &str = "[worker]\nconcurrency = 1\npoll_interval = \"100ms\"\n\
                    [retry]\nbase = \"1h\"\ncap = \"2h\"\n";

/// A config with one process handler per kind of `kinds`, each running `argv`, plus `extra` lines in
/// every handler section.
fn config(argv: &[&str], kinds: &[&str], extra: &str) -> String {
    let mut text = BASE.to_string();
    for k in kinds {
        text += &format!("[handlers.{k}]\nprocess = {}\n{extra}\n", toml_list(argv));
    }
    text
}

/// A `jobq worker --forever` on `config_text`, its log in `dir/worker.log`. SIGKILLed if the test
/// fails before [`stop_worker`]: a failed test leaves no worker running (its copies die with it).
fn spawn_worker(db: &TestDb, dir: &Path, config_text: &str) -> WorkerGuard {
    let cfg = write_config(dir, config_text);
    let log = std::fs::File::create(dir.join("worker.log")).unwrap();
    let child = jobq(
        Some(&db.url),
        &["worker", "--forever", "--config", cfg.to_str().unwrap()],
    )
    .stdout(Stdio::null())
    .stderr(log)
    .spawn()
    .unwrap();
    WorkerGuard(Some(child))
}

struct WorkerGuard(Option<Child>);

impl WorkerGuard {
    fn take(mut self) -> Child {
        self.0.take().expect("a running worker")
    }
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// SIGTERM, then the worker must exit 0 within 30 s; returns its log.
async fn stop_worker(worker: WorkerGuard, dir: &Path) -> String {
    let worker = worker.take();
    kill(Pid::from_raw(worker.id() as i32), Signal::SIGTERM).unwrap();
    let out = tokio::task::spawn_blocking(move || wait_output(worker, Duration::from_secs(30)))
        .await
        .unwrap();
    let log = std::fs::read_to_string(dir.join("worker.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "worker exited with {}: {log}",
        out.status
    );
    log
}

/// Inserts a job and returns its id.
async fn insert(db: &TestDb, kind: &str, payload: serde_json::Value, timeout: Option<u32>) -> u64 {
    let r = db
        .pool
        .execute(
            sqlx::query("INSERT INTO job_queue (kind, payload, timeout_secs) VALUES (?, ?, ?)")
                .bind(kind)
                .bind(payload.to_string())
                .bind(timeout),
        )
        .await
        .unwrap();
    r.last_insert_id()
}

async fn job(db: &TestDb, id: u64) -> JobRecord {
    jobq::testing::get_job(&db.pool, id).await.unwrap()
}

fn last_error(j: &JobRecord) -> String {
    j.last_error.clone().unwrap_or_default()
}

/// Waits until the job is no longer queued or running (its attempt was recorded).
async fn settled(db: &TestDb, id: u64, log: &Path) -> JobRecord {
    let what = format!("job {id} to settle (worker log {})", log.display());
    wait_until(&what, Duration::from_secs(30), || async {
        let j = job(db, id).await;
        !matches!(j.state, State::Queued | State::Running)
            || (j.state == State::Queued
                && j.last_error.is_none()
                && j.attempts == 0
                && snoozed(db, id).await)
    })
    .await;
    job(db, id).await
}

/// Whether the job's run_at is in the future (a snoozed job is queued again, for later).
async fn snoozed(db: &TestDb, id: u64) -> bool {
    due_in_secs(db, id).await > 60
}

async fn due_in_secs(db: &TestDb, id: u64) -> i64 {
    db.scalar(&format!(
        "SELECT TIMESTAMPDIFF(SECOND, NOW(6), run_at) FROM job_queue WHERE id = {id}"
    ))
    .await
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn first_pid(path: &Path) -> Option<u32> {
    lines(path).first()?.split_whitespace().next()?.parse().ok()
}

fn gone(pid: u32) -> bool {
    jobq::testing::local_process(pid, None) == jobq::testing::ProcessState::Dead
}

// ---------------------------------------------------------------------------------------------------
// Failures of the program
// ---------------------------------------------------------------------------------------------------

/// A crash mid-job, a line that is not the protocol, no answer before the timeout, a crash on start and
/// a hello of another version: each fails its attempt saying which, and later jobs run on a new copy.
#[tokio::test]
async fn each_failure_of_the_program_says_what_happened_and_a_new_copy_runs_the_next_job() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let script = demo("demo.py");
    let mut text = config(&[&py, &script], &["echo", "crash", "garbage", "sleep"], "");
    text += &config(&[&py, &script, "--crash-on-start"], &["broken"], "").replace(BASE, "");
    text += &config(&[&py, &script, "--wrong-version"], &["future"], "").replace(BASE, "");
    let worker = spawn_worker(&db, &dir, &text);
    let log = dir.join("worker.log");
    let out = dir.join("echo.txt");
    let echo = || serde_json::json!({"file": out.to_str().unwrap(), "text": "hi"});

    // A healthy job first, so each kind's copy is known to work.
    let id = insert(&db, "echo", echo(), None).await;
    assert_eq!(settled(&db, id, &log).await.state, State::Done);

    let id = insert(&db, "crash", serde_json::json!({}), None).await;
    let j = settled(&db, id, &log).await;
    assert_eq!(j.state, State::Retry);
    let e = last_error(&j);
    assert!(
        e.contains("exited with status 3")
            && e.contains("before it answered job")
            && e.contains("demo: about to crash"),
        "{e}"
    );

    let id = insert(&db, "garbage", serde_json::json!({}), None).await;
    let j = settled(&db, id, &log).await;
    assert_eq!(j.state, State::Retry);
    let e = last_error(&j);
    assert!(
        e.contains("not a protocol v1 answer") && e.contains("this is not json"),
        "{e}"
    );

    let sleeps = dir.join("sleep.txt");
    let id = insert(
        &db,
        "sleep",
        serde_json::json!({"file": sleeps.to_str().unwrap(), "secs": 60}),
        Some(1),
    )
    .await;
    let j = settled(&db, id, &log).await;
    assert_eq!(j.state, State::Retry);
    assert!(
        last_error(&j).contains("timed out after 1s"),
        "{}",
        last_error(&j)
    );
    let pid = first_pid(&sleeps).expect("the sleeping copy wrote its pid");
    wait_until(
        "the timed-out copy gone",
        Duration::from_secs(10),
        || async { gone(pid) },
    )
    .await;

    let id = insert(&db, "broken", serde_json::json!({}), None).await;
    let j = settled(&db, id, &log).await;
    assert_eq!(j.state, State::Retry);
    let e = last_error(&j);
    assert!(
        e.contains("exited with status 3 before its hello line")
            && e.contains("demo: cannot start, no configuration"),
        "{e}"
    );

    let id = insert(&db, "future", serde_json::json!({}), None).await;
    let j = settled(&db, id, &log).await;
    let e = last_error(&j);
    assert!(
        e.contains("protocol version 2") && e.contains("version 1 only"),
        "{e}"
    );

    // The copies that failed were replaced: the same kinds still run, on new processes.
    let first = first_pid(&out).unwrap();
    let id = insert(&db, "echo", echo(), None).await;
    assert_eq!(settled(&db, id, &log).await.state, State::Done);
    let id = insert(&db, "garbage", serde_json::json!({}), None).await;
    let e = last_error(&settled(&db, id, &log).await);
    assert!(e.contains("not a protocol v1 answer"), "{e}");
    assert_eq!(lines(&out).len(), 2);
    assert!(
        lines(&out)[1].starts_with(&first.to_string()),
        "the echo copy was healthy and stays"
    );

    let log_text = stop_worker(worker, &dir).await;
    // The program's stderr is in the worker's log, under the job's id.
    let line = log_text
        .lines()
        .find(|l| l.contains("echo says hello on stdout"))
        .unwrap_or_else(|| panic!("print() goes to stderr, which jobq logs: {log_text}"));
    assert!(
        line.contains("job_id=1"),
        "logged under the job's id: {line}"
    );
}

/// A copy that exits while it waits for a job is replaced before the next job is sent, and that job
/// runs as if nothing happened.
#[tokio::test]
async fn a_copy_lost_between_jobs_is_replaced_without_failing_the_next_job() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let text = config(&[&py, &demo("demo.py")], &["quit_soon"], "");
    let worker = spawn_worker(&db, &dir, &text);
    let log = dir.join("worker.log");
    let pids = dir.join("pids.txt");
    let payload = serde_json::json!({"file": pids.to_str().unwrap()});
    let first = insert(&db, "quit_soon", payload.clone(), None).await;
    assert_eq!(settled(&db, first, &log).await.state, State::Done);
    let pid = first_pid(&pids).unwrap();
    wait_until(
        "the copy exited on its own",
        Duration::from_secs(10),
        || async { gone(pid) },
    )
    .await;
    let second = insert(&db, "quit_soon", payload, None).await;
    let j = settled(&db, second, &log).await;
    assert_eq!(
        (j.state, j.attempts),
        (State::Done, 1),
        "{}",
        last_error(&j)
    );
    let all = lines(&pids);
    assert_eq!(all.len(), 2);
    assert_ne!(all[0], all[1], "a new copy ran the second job");
    let log_text = stop_worker(worker, &dir).await;
    assert!(
        log_text.contains("exited with status 4 while it waited for a job"),
        "{log_text}"
    );
}

/// A crash on start is retried only after a backoff: the program is not started again at once.
#[tokio::test]
async fn a_program_that_crashes_on_start_is_restarted_with_a_backoff() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let script = demo("demo.py");
    let text = config(&[&py, &script, "--crash-on-start"], &["broken"], "");
    let worker = spawn_worker(&db, &dir, &text);
    let log = dir.join("worker.log");
    let a = insert(&db, "broken", serde_json::json!({}), None).await;
    settled(&db, a, &log).await;
    let b = insert(&db, "broken", serde_json::json!({}), None).await;
    let c = insert(&db, "broken", serde_json::json!({}), None).await;
    settled(&db, b, &log).await;
    settled(&db, c, &log).await;
    // Attempts of b and c started after backoffs of 0.5 s and 1 s.
    let spread: f64 = db
        .scalar(&format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, \
               (SELECT MAX(ended_at) FROM jobq_attempts WHERE job_id = {a}), \
               (SELECT MAX(ended_at) FROM jobq_attempts WHERE job_id = {c})) / 1e6"
        ))
        .await;
    assert!(
        spread >= 1.4,
        "restarts after 0.5 s and 1 s, took {spread} s"
    );
    for id in [a, b, c] {
        assert!(last_error(&job(&db, id).await).contains("exited with status 3"));
    }
    stop_worker(worker, &dir).await;
}

// ---------------------------------------------------------------------------------------------------
// Pool behaviour
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_copy_is_recycled_after_max_jobs_per_process() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let text = config(
        &[&py, &demo("demo.py")],
        &["echo"],
        "max_jobs_per_process = 3",
    )
    .replace("concurrency = 1", "concurrency = 4");
    let out = dir.join("echo.txt");
    for _ in 0..10 {
        insert(
            &db,
            "echo",
            serde_json::json!({"file": out.to_str().unwrap()}),
            None,
        )
        .await;
    }
    let worker = spawn_worker(&db, &dir, &text);
    wait_until("10 jobs done", Duration::from_secs(30), || async {
        db.states().await == "done=10"
    })
    .await;
    stop_worker(worker, &dir).await;
    let mut pids: Vec<String> = lines(&out)
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(pids.len(), 10);
    pids.dedup();
    let distinct: std::collections::BTreeSet<_> = pids.iter().collect();
    assert!(distinct.len() >= 4, "{pids:?}");
    for p in distinct {
        let pid: u32 = p.parse().unwrap();
        wait_until(
            "every copy gone after the worker stopped",
            Duration::from_secs(5),
            || async { gone(pid) },
        )
        .await;
    }
}

/// `processes` bounds how many jobs of the kind run at once, whatever the worker's concurrency.
#[tokio::test]
async fn processes_is_the_kinds_concurrency() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let text = config(&[&py, &demo("demo.py")], &["overlap"], "processes = 2")
        .replace("concurrency = 1", "concurrency = 6");
    let marks = dir.join("marks.txt");
    for _ in 0..6 {
        insert(
            &db,
            "overlap",
            serde_json::json!({"file": marks.to_str().unwrap(), "secs": 0.3}),
            None,
        )
        .await;
    }
    let worker = spawn_worker(&db, &dir, &text);
    wait_until("6 jobs done", Duration::from_secs(30), || async {
        db.states().await == "done=6"
    })
    .await;
    stop_worker(worker, &dir).await;
    let (mut running, mut most) = (0i32, 0i32);
    let mut pids = std::collections::BTreeSet::new();
    for mark in lines(&marks) {
        running += if mark.starts_with('+') { 1 } else { -1 };
        most = most.max(running);
        pids.insert(mark[1..].to_string());
    }
    assert_eq!((most, pids.len()), (2, 2), "{:?}", lines(&marks));
}

/// A `--forever` worker starts its copies when it starts, before any job, and retires them all when it
/// stops.
#[tokio::test]
async fn a_forever_worker_starts_its_copies_at_once_and_stops_them_when_it_stops() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let started = dir.join("started.txt");
    let text = config(
        &[&py, &demo("demo.py")],
        &["echo"],
        &format!(
            "processes = 3\nenv = {{ DEMO_START_LOG = {:?} }}",
            started.to_str().unwrap()
        ),
    );
    let worker = spawn_worker(&db, &dir, &text);
    wait_until("three copies started", Duration::from_secs(20), || async {
        lines(&started).len() == 3
    })
    .await;
    let pids: Vec<u32> = lines(&started).iter().map(|l| l.parse().unwrap()).collect();
    assert!(pids.iter().all(|p| !gone(*p)));
    let out = dir.join("echo.txt");
    let id = insert(
        &db,
        "echo",
        serde_json::json!({"file": out.to_str().unwrap()}),
        None,
    )
    .await;
    settled(&db, id, &dir.join("worker.log")).await;
    assert_eq!(
        lines(&started).len(),
        3,
        "the job ran on a copy already there"
    );
    stop_worker(worker, &dir).await;
    for pid in pids {
        assert!(gone(pid), "copy {pid} outlived its worker's clean stop");
    }
}

/// SIGKILL to the worker: the copy running a job dies with it, the reaper later hands the job on, and
/// the next worker runs it. The copies the program recorded (the demo's `recorded` kind), the row and
/// `jobq_attempts` are checked as one history: the job ran twice only because its claimant died, and
/// the second copy began only once the first was gone.
#[tokio::test]
async fn a_sigkilled_workers_programs_die_with_it_and_the_reaper_hands_the_job_on() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let text = config(&[&py, &demo("demo.py")], &["recorded"], "processes = 2");
    let (effects, lock) = (dir.join("effects"), dir.join("lock"));
    let id = insert(
        &db,
        "recorded",
        serde_json::json!({
            "effects": effects.to_str().unwrap(),
            "lock": lock.to_str().unwrap(),
            "secs": 120,
            "retry_secs": 0.2,
        }),
        None,
    )
    .await;
    let copies = |effects: &Path| {
        let mut h = History::default();
        h.read_effects_file(effects);
        h.copies(id)
    };
    let worker = spawn_worker(&db, &dir, &text);
    wait_until("the job running", Duration::from_secs(20), || async {
        !copies(&effects).is_empty()
    })
    .await;
    let pid = copies(&effects)[0].pid;
    assert!(!gone(pid) && history::lock_held(&lock));
    let killed_claimant = history::sole_worker_token(&db.pool).await;
    let worker = worker.take();
    kill(Pid::from_raw(worker.id() as i32), Signal::SIGKILL).unwrap();
    let _ = tokio::task::spawn_blocking(move || wait_output(worker, Duration::from_secs(5))).await;
    wait_until(
        "the program gone with its worker",
        Duration::from_secs(2),
        || async { gone(pid) && !history::lock_held(&lock) },
    )
    .await;
    let gone_at = At::now();

    let stop = CancellationToken::new();
    let reaper = Reaper::new(
        db.pool.clone(),
        ReaperConfig {
            retention: None,
            ..ReaperConfig::default()
        },
    )
    .unwrap();
    let task = tokio::spawn(reaper.run(stop.clone()));
    wait_until(
        "the job runnable again",
        Duration::from_secs(20),
        || async { matches!(job(&db, id).await.state, State::Queued | State::Retry) },
    )
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();

    // The next worker runs it to its end.
    let cfg = write_config(&dir, &text);
    let out = jobq(
        Some(&db.url),
        &["worker", "--config", cfg.to_str().unwrap()],
    )
    .output()
    .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let j = job(&db, id).await;
    assert_eq!((j.state, j.attempts), (State::Done, 2), "{j:?}");
    let mut h = History::of_commands(&effects, &db.pool).await;
    h.saw_gone(id, 1, gone_at);
    h.read_worker_log(&log);
    history::assert_ran_again_once(&h, &killed_claimant, id);
}

/// An operator's cancel stops the copy running the job, and the job ends cancelled.
#[tokio::test]
async fn cancelling_a_running_job_kills_its_copy_and_the_job_ends_cancelled() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let text = config(&[&py, &demo("demo.py")], &["sleep", "echo"], "");
    let sleeps = dir.join("sleep.txt");
    let id = insert(
        &db,
        "sleep",
        serde_json::json!({"file": sleeps.to_str().unwrap(), "secs": 120}),
        None,
    )
    .await;
    let worker = spawn_worker(&db, &dir, &text);
    wait_until("the job running", Duration::from_secs(20), || async {
        first_pid(&sleeps).is_some()
    })
    .await;
    let pid = first_pid(&sleeps).unwrap();
    jobq::Jobs::new(db.pool.clone()).cancel(id).await.unwrap();
    wait_until("cancelled", Duration::from_secs(15), || async {
        job(&db, id).await.state == State::Cancelled
    })
    .await;
    wait_until("its copy gone", Duration::from_secs(10), || async {
        gone(pid)
    })
    .await;
    stop_worker(worker, &dir).await;
}

/// A program that writes its effect and `CALL jobq_finish` in one transaction and answers
/// `"finished": true`: the job is done, once, and the worker does not finish it again.
#[tokio::test]
async fn a_program_finishes_its_job_in_its_own_transaction_with_jobq_finish() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    db.exec("CREATE TABLE payments (job_id BIGINT UNSIGNED PRIMARY KEY, amount INT NOT NULL)")
        .await;
    let dir = scratch_dir();
    let text = config(
        &[&py, &demo("demo.py")],
        &["pay"],
        &format!("env = {{ DEMO_DATABASE_URL = {:?} }}", db.url),
    );
    let id = insert(&db, "pay", serde_json::json!({"amount": 5}), None).await;
    let worker = spawn_worker(&db, &dir, &text);
    let j = settled(&db, id, &dir.join("worker.log")).await;
    assert_eq!(j.state, State::Done, "{}", last_error(&j));
    assert_eq!(j.attempts, 1);
    let paid: i64 = db
        .scalar(&format!(
            "SELECT CAST(SUM(amount) AS SIGNED) FROM payments WHERE job_id = {id}"
        ))
        .await;
    assert_eq!(paid, 5);
    stop_worker(worker, &dir).await;
}

// ---------------------------------------------------------------------------------------------------
// The reference workers
// ---------------------------------------------------------------------------------------------------

/// Every outcome through a language's reference worker: done, an error retried with backoff, a retry
/// at the delay the program named, fatal, snooze, and a claimed application finish that did not
/// happen.
async fn outcomes(interpreter: &str, file: &str) {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let kinds = [
        "echo", "fail", "later", "fatal", "snooze", "finished", "reported",
    ];
    let text = config(&[interpreter, &demo(file)], &kinds, "processes = 2");
    let out = dir.join("echo.txt");
    let echo = insert(
        &db,
        "echo",
        serde_json::json!({"file": out.to_str().unwrap(), "text": "héllo"}),
        None,
    )
    .await;
    let fail = insert(&db, "fail", serde_json::json!({}), None).await;
    let later = insert(&db, "later", serde_json::json!({}), None).await;
    let fatal = insert(&db, "fatal", serde_json::json!({}), None).await;
    let snooze = insert(&db, "snooze", serde_json::json!({}), None).await;
    let finished = insert(&db, "finished", serde_json::json!({}), None).await;
    let reported = insert(&db, "reported", serde_json::json!({"n": 3}), None).await;
    let worker = spawn_worker(&db, &dir, &text);
    let log = dir.join("worker.log");

    let j = settled(&db, echo, &log).await;
    assert_eq!(j.state, State::Done, "{}", last_error(&j));
    let line = lines(&out).join("\n");
    // "PID TEXT ATTEMPT CLAIM": the claim token is host:pid:…, the worker's.
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields.len(), 4, "{line}");
    assert_eq!(&fields[1..3], ["héllo", "1"], "{line}");
    assert!(
        fields[3].matches(':').count() >= 2 && !fields[3].contains("undefined"),
        "the program got the claim: {line}"
    );

    let j = settled(&db, fail, &log).await;
    assert_eq!((j.state, j.attempts), (State::Retry, 1));
    assert!(
        last_error(&j).contains("failed on purpose"),
        "{}",
        last_error(&j)
    );
    let due = due_in_secs(&db, fail).await;
    assert!(due > 1000, "the backoff of [retry]: {due}");

    let j = settled(&db, later, &log).await;
    assert_eq!(j.state, State::Retry);
    assert!(last_error(&j).contains("rate limited"));
    let due = due_in_secs(&db, later).await;
    assert!((3500..=3600).contains(&due), "retry_in 1h: {due}");

    let j = settled(&db, fatal, &log).await;
    assert_eq!((j.state, j.attempts), (State::Dead, 1));
    assert!(last_error(&j).contains("bad input, never retry"));

    let j = settled(&db, snooze, &log).await;
    assert_eq!(
        (j.state, j.attempts),
        (State::Queued, 0),
        "a snooze uses no attempt"
    );
    let due = due_in_secs(&db, snooze).await;
    assert!((500..=600).contains(&due), "snoozed 10m: {due}");

    let j = settled(&db, finished, &log).await;
    assert_eq!(j.state, State::Retry);
    assert!(
        last_error(&j).contains("did not commit"),
        "{}",
        last_error(&j)
    );

    // Progress before the answer, and an output in it.
    let j = settled(&db, reported, &log).await;
    assert_eq!(j.state, State::Done, "{}", last_error(&j));
    let p = j.progress.expect("the progress line was recorded");
    assert_eq!((p.percent, p.message.as_deref()), (50.0, Some("half way")));
    let output = jobq::Jobs::new(db.pool.clone())
        .output(reported)
        .await
        .unwrap()
        .expect("the answer's output was recorded");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&output).unwrap(),
        serde_json::json!({"n": 3, "words": ["ünï", "<b>"]})
    );

    stop_worker(worker, &dir).await;
}

#[tokio::test]
async fn the_python_reference_worker_runs_every_outcome() {
    let Some(p) = python() else { return };
    outcomes(&p, "demo.py").await;
}

#[tokio::test]
async fn the_node_reference_worker_runs_every_outcome() {
    let Some(p) = interpreter("JOBQ_NODE", "/usr/bin/node") else {
        return;
    };
    outcomes(&p, "demo.js").await;
}

#[tokio::test]
async fn the_php_reference_worker_runs_every_outcome() {
    let Some(p) = interpreter("JOBQ_PHP", "/usr/bin/php") else {
        return;
    };
    outcomes(&p, "demo.php").await;
}

#[tokio::test]
async fn the_ruby_reference_worker_runs_every_outcome() {
    let Some(p) = interpreter("JOBQ_RUBY", "/usr/bin/ruby") else {
        return;
    };
    outcomes(&p, "demo.rb").await;
}

// ---------------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------------

fn load(text: &str) -> Result<Config, String> {
    let dir = scratch_dir();
    let r = Config::load(&write_config(&dir, text)).map_err(|e| format!("{e:#}"));
    std::fs::remove_dir_all(&dir).ok();
    r
}

#[tokio::test]
async fn process_handler_configs_that_do_not_fit_are_refused_naming_the_fields() {
    let refused = [
        (
            "[handlers.a]\nprocess = [\"/bin/cat\"]\ncommand = [\"/bin/cat\"]\n",
            "not both",
        ),
        (
            "[handlers.a]\nprocess = [\"/bin/cat\"]\nprocesses = 0\n",
            "`processes` must be from 1",
        ),
        (
            "[handlers.a]\nprocess = []\n",
            "`process` must name a program",
        ),
        (
            "[handlers.a]\nprocess = [\"/bin/cat\"]\nmax_jobs_per_process = 0\n",
            "`max_jobs_per_process` must be at least 1",
        ),
        (
            "[handlers.a]\ncommand = [\"/bin/cat\"]\nprocesses = 2\n",
            "belong to `process` handlers",
        ),
        (
            "[handlers.a]\nprocess = [\"/bin/cat\"]\nsnooze = \"1m\"\n",
            "`snooze` belongs to `command`",
        ),
        (
            "[handlers.a]\nprocess = [\"/bin/cat\"]\nsql = \"SELECT 1\"\n",
            "not both",
        ),
        (
            "[handlers.a]\nprocess = [\"/bin/cat\"]\nprocess_count = 2\n",
            "process_count",
        ),
    ];
    for (text, want) in refused {
        let e = load(text)
            .err()
            .unwrap_or_else(|| panic!("accepted: {text}"));
        assert!(e.contains(want), "{text}: {e}");
    }
    let ok = load(
        "[handlers.a]\nprocess = [\"/bin/cat\"]\nprocesses = 4\nmax_jobs_per_process = 100\n\
         env = { A = \"1\" }\ninherit_env = [\"PATH\"]\ntimeout = \"5m\"\n",
    );
    assert!(ok.is_ok(), "{ok:?}");
}

/// A program that is not there stops the worker at its start, naming the kind and the program.
#[tokio::test]
async fn a_worker_refuses_to_start_without_its_process_handlers_program() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[handlers.resize]\nprocess = [\"/nonexistent/jobq_worker.py\"]\n",
    );
    let out = jobq(
        Some(&db.url),
        &["worker", "--config", cfg.to_str().unwrap()],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("resize") && err.contains("\"/nonexistent/jobq_worker.py\" does not exist"),
        "{err}"
    );
}

/// A program reports progress with lines before its answer and leaves an output in it; a progress line
/// that breaks the protocol fails the attempt, saying why.
#[tokio::test]
async fn a_program_reports_progress_and_leaves_an_output() {
    let Some(py) = python() else { return };
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let text = config(&[&py, &demo("demo.py")], &["report"], "");
    let worker = spawn_worker(&db, &dir, &text);
    let id = insert(&db, "report", serde_json::json!({"n": 7}), None).await;
    let jobs = jobq::Jobs::new(db.pool.clone());
    wait_until("the first report", Duration::from_secs(30), || async {
        jobs.get(id).await.unwrap().progress.is_some()
    })
    .await;
    let first = jobs.get(id).await.unwrap();
    if first.state == State::Running {
        let p = first.progress.unwrap();
        assert_eq!((p.percent, p.message.as_deref()), (50.0, Some("half way")));
    }
    let j = settled(&db, id, &dir.join("worker.log")).await;
    assert_eq!(j.state, State::Done, "{}", last_error(&j));
    let p = j.progress.unwrap();
    assert_eq!((p.percent, p.message, p.attempt), (100.0, None, 1));
    let output: serde_json::Value =
        serde_json::from_str(&jobs.output(id).await.unwrap().unwrap()).unwrap();
    assert_eq!(output, serde_json::json!({"n": 7, "words": ["ünï", "<b>"]}));
    stop_worker(worker, &dir).await;
}
