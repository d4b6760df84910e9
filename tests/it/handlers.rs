//! Command and SQL handlers from a config file, run through a real worker.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use jobq::RetryPolicy;
use jobq::config::Config;
use jobq::{CancellationToken, JobRecord, Mode, NewJob, State, Worker, WorkerConfig, WorkerReport};

use crate::common::{TestDb, run_jobq, scratch_dir, wait_until, write_config};

/// A TOML string literal (a JSON string is one).
fn toml_str(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).unwrap()
}

/// A TOML array of strings.
fn toml_list(items: &[&str]) -> String {
    serde_json::to_string(items).unwrap()
}

/// Runs a draining worker in this process with the handlers of `config_text`, on `queues`. Failed jobs
/// come back after at least half an hour, so a drain runs each job once.
async fn run_worker(db: &TestDb, config_text: &str, queues: &[&str]) -> WorkerReport {
    run_worker_then(db, config_text, queues, || {}).await
}

/// [`run_worker`], calling `after_start` once the handlers are built and before the worker runs.
async fn run_worker_then(
    db: &TestDb,
    config_text: &str,
    queues: &[&str],
    after_start: impl FnOnce(),
) -> WorkerReport {
    let dir = scratch_dir();
    let path = write_config(&dir, config_text);
    let config = Config::load(&path).expect("config loads");
    let handlers = config.handlers(&db.pool).expect("handlers");
    after_start();
    let cfg = WorkerConfig {
        queues: queues.iter().map(|q| q.to_string()).collect(),
        mode: Mode::Drain,
        retry: RetryPolicy {
            base: Duration::from_secs(3600),
            cap: Duration::from_secs(7200),
        },
        ..Default::default()
    };
    let worker = Worker::new(db.pool.clone(), handlers, cfg).expect("worker");
    let report = tokio::time::timeout(
        Duration::from_secs(30),
        worker.run(CancellationToken::new()),
    )
    .await
    .expect("the worker drains within 30 s")
    .expect("worker runs");
    std::fs::remove_dir_all(&dir).ok();
    report
}

async fn job(db: &TestDb, id: impl Into<jobq::JobId>) -> JobRecord {
    jobq::testing::get_job(&db.pool, id).await.unwrap()
}

async fn enqueue(db: &TestDb, job: NewJob) -> jobq::JobId {
    jobq::enqueue(&db.pool, &job).await.unwrap()
}

fn last_error(j: &JobRecord) -> &str {
    j.last_error.as_deref().unwrap_or("")
}

/// Seconds from the database's now to the job's run_at.
async fn due_in_secs(db: &TestDb, id: impl Into<jobq::JobId>) -> i64 {
    db.scalar(&format!(
        "SELECT TIMESTAMPDIFF(SECOND, NOW(6), run_at) FROM job_queue WHERE id = {}",
        id.into()
    ))
    .await
}

/// True while `pid` is a live process (a zombie counts as gone: it has exited and only waits to be
/// reaped by whoever adopted it).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("");
            state != "Z" && state != "X"
        }
    }
}

fn read_pid(path: &Path) -> u32 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------------
// Command handlers
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn command_gets_the_payload_on_stdin_and_the_job_in_its_environment() {
    let db = TestDb::new().await;
    let out = scratch_dir();
    let script = "cat > \"$OUT/$JOBQ_JOB_ID.stdin\"; env | grep -E '^(JOBQ_|X=)' > \"$OUT/$JOBQ_JOB_ID.env\"";
    let config = format!(
        "[handlers.cmd]\ncommand = {}\nenv = {{ X = \"y\", OUT = {} }}\n",
        toml_list(&["sh", "-c", script]),
        toml_str(out.to_str().unwrap()),
    );
    // Written the way MySQL would normalise it, so the bytes are the same on MySQL and MariaDB.
    let payload = r#"{"n": 1, "msg": "héllo 🎉 wörld"}"#;
    let id = enqueue(
        &db,
        NewJob::new("cmd")
            .queue("mail")
            .payload_json(payload)
            .unwrap(),
    )
    .await;

    let report = run_worker(&db, &config, &["default", "mail"]).await;
    assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");

    let stdin = std::fs::read(out.join(format!("{id}.stdin"))).expect("stdin file");
    assert_eq!(
        String::from_utf8_lossy(&stdin),
        payload,
        "the payload reaches stdin byte for byte"
    );
    let env_text = std::fs::read_to_string(out.join(format!("{id}.env"))).expect("env file");
    let env: BTreeMap<&str, &str> = env_text.lines().filter_map(|l| l.split_once('=')).collect();
    let id_text = id.to_string();
    for (key, want) in [
        ("JOBQ_JOB_ID", id_text.as_str()),
        ("JOBQ_KIND", "cmd"),
        ("JOBQ_QUEUE", "mail"),
        ("JOBQ_ATTEMPT", "1"),
        ("JOBQ_MAX_ATTEMPTS", "20"),
        ("X", "y"),
    ] {
        assert_eq!(env.get(key).copied(), Some(want), "{key} in:\n{env_text}");
    }
    assert!(
        env.get("JOBQ_CLAIM").is_some_and(|c| !c.is_empty()),
        "JOBQ_CLAIM in:\n{env_text}"
    );

    let j = job(&db, id).await;
    assert_eq!(j.state, State::Done);
    assert_eq!(j.attempts, 1);
    assert_eq!(j.last_error, None);
    assert_eq!(j.claim, None);
    assert!(j.finished_at.is_some());
    std::fs::remove_dir_all(&out).ok();
}

/// A command reports through the two files jobq names: its progress line, read while it runs and once
/// more when it exits, and its output, read when it exits 0; output that is not JSON kills the job
/// naming the file. The files' directory goes with the attempt.
#[tokio::test]
async fn a_command_reports_progress_and_output_through_its_files() {
    let db = TestDb::new().await;
    let out = scratch_dir();
    let script = "echo \"$JOBQ_PROGRESS_FILE\" > \"$OUT/$JOBQ_JOB_ID.path\"; \
                  echo '30 resizing' > \"$JOBQ_PROGRESS_FILE\"; sleep 1.5; \
                  echo '100% resized 3 of 3' > \"$JOBQ_PROGRESS_FILE\"; \
                  if [ \"$JOBQ_KIND\" = good ]; then echo '{\"thumbs\": 3}' > \"$JOBQ_OUTPUT_FILE\"; \
                  else echo 'thumbs: 3' > \"$JOBQ_OUTPUT_FILE\"; fi";
    let mut config = String::new();
    for kind in ["good", "bad"] {
        config += &format!(
            "[handlers.{kind}]\ncommand = {}\nenv = {{ OUT = {} }}\n",
            toml_list(&["sh", "-c", script]),
            toml_str(out.to_str().unwrap()),
        );
    }
    let good = enqueue(&db, NewJob::new("good")).await;
    let bad = enqueue(&db, NewJob::new("bad")).await;
    run_worker(&db, &config, &["default"]).await;

    let j = job(&db, good).await;
    assert_eq!(j.state, State::Done, "{}", last_error(&j));
    let p = j.progress.expect("progress");
    assert_eq!(
        (p.percent, p.message.as_deref(), p.attempt),
        (100.0, Some("resized 3 of 3"), 1),
        "the last line, read after the exit"
    );
    let output = jobq::Jobs::new(db.pool.clone()).output(good).await.unwrap();
    assert_eq!(
        output.map(|o| serde_json::from_str::<serde_json::Value>(&o).unwrap()),
        Some(serde_json::json!({"thumbs": 3}))
    );
    let j = job(&db, bad).await;
    assert_eq!(j.state, State::Dead);
    assert!(
        last_error(&j).contains("JOBQ_OUTPUT_FILE") && last_error(&j).contains("not JSON"),
        "{}",
        last_error(&j)
    );
    for id in [good, bad] {
        let path = std::fs::read_to_string(out.join(format!("{id}.path"))).unwrap();
        let dir = Path::new(path.trim()).parent().unwrap().to_path_buf();
        assert!(
            !dir.exists(),
            "{} is removed with the attempt",
            dir.display()
        );
    }
    std::fs::remove_dir_all(&out).ok();
}

#[tokio::test]
async fn a_failing_command_is_retried_later_with_its_status_and_stderr_or_dead_at_max_attempts() {
    let db = TestDb::new().await;
    let config = format!(
        "[handlers.fail]\ncommand = {}\n",
        toml_list(&["sh", "-c", "echo 'the disk is on fire' >&2; exit 3"])
    );
    db.exec("INSERT INTO job_queue (kind) VALUES ('fail')")
        .await;
    db.exec("INSERT INTO job_queue (kind, max_attempts) VALUES ('fail', 1)")
        .await;

    let report = run_worker(&db, &config, &["default"]).await;
    assert_eq!(
        (report.claimed, report.retried, report.dead, report.done),
        (2, 1, 1, 0),
        "{report:?}"
    );

    let retry = job(&db, 1).await;
    assert_eq!(retry.state, State::Retry);
    assert_eq!(retry.attempts, 1);
    assert!(
        last_error(&retry).contains("exited with status 3")
            && last_error(&retry).contains("the disk is on fire"),
        "last_error: {:?}",
        retry.last_error
    );
    assert_eq!(retry.claim, None);
    assert_eq!(retry.finished_at, None);
    // Backoff base 1 h with equal jitter: between 30 and 60 minutes ahead by the database's clock.
    let due_in = due_in_secs(&db, 1).await;
    assert!(
        (1790..=3600).contains(&due_in),
        "run_at is {due_in} s ahead"
    );

    let dead = job(&db, 2).await;
    assert_eq!(dead.state, State::Dead);
    assert_eq!(dead.attempts, 1);
    assert!(
        last_error(&dead).contains("exited with status 3")
            && last_error(&dead).contains("the disk is on fire"),
        "last_error: {:?}",
        dead.last_error
    );
    assert!(dead.finished_at.is_some());
}

#[tokio::test]
async fn a_command_killed_by_a_signal_fails_naming_the_signal() {
    let db = TestDb::new().await;
    let config = format!(
        "[handlers.kill]\ncommand = {}\n",
        toml_list(&["sh", "-c", "kill -9 $$"])
    );
    let id = enqueue(&db, NewJob::new("kill")).await;
    run_worker(&db, &config, &["default"]).await;

    let j = job(&db, id).await;
    assert_eq!(j.state, State::Retry);
    assert_eq!(j.attempts, 1);
    let e = last_error(&j);
    assert!(
        e.contains("signal 9") && e.contains("SIGKILL"),
        "last_error: {e:?}"
    );
    assert!(due_in_secs(&db, id).await > 1000);
}

/// A script that records its own pid and a background child's pid, then waits far longer than any
/// timeout in these tests.
const SLOW_SCRIPT: &str =
    "echo $$ > \"$OUT/sh.pid\"; sleep 30 & echo $! > \"$OUT/bg.pid\"; sleep 30";

async fn assert_timed_out_and_group_killed(
    db: &TestDb,
    config: &str,
    id: impl Into<jobq::JobId> + Copy,
    out: &Path,
) {
    let started = Instant::now();
    let report = run_worker(db, config, &["default"]).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "a 1 s timeout took {took:?} to fail the job"
    );
    assert_eq!(report.retried, 1, "{report:?}");

    let j = job(db, id).await;
    assert_eq!(j.state, State::Retry);
    assert_eq!(j.attempts, 1);
    assert!(
        last_error(&j).contains("timed out"),
        "last_error: {:?}",
        j.last_error
    );
    assert!(due_in_secs(db, id).await > 1000);

    // Both the shell and the sleep it left in the background are gone: the whole group was killed.
    let shell = read_pid(&out.join("sh.pid"));
    let background = read_pid(&out.join("bg.pid"));
    wait_until(
        "the command's process group to be gone",
        Duration::from_secs(3),
        || async { !process_alive(shell) && !process_alive(background) },
    )
    .await;
}

#[tokio::test]
async fn a_command_over_its_handler_timeout_is_killed_with_its_whole_process_group() {
    let db = TestDb::new().await;
    let out = scratch_dir();
    let config = format!(
        "[handlers.slow]\ncommand = {}\ntimeout = \"1s\"\nenv = {{ OUT = {} }}\n",
        toml_list(&["sh", "-c", SLOW_SCRIPT]),
        toml_str(out.to_str().unwrap()),
    );
    let id = enqueue(&db, NewJob::new("slow")).await;
    assert_timed_out_and_group_killed(&db, &config, id, &out).await;
    std::fs::remove_dir_all(&out).ok();
}

#[tokio::test]
async fn a_jobs_own_timeout_overrides_a_longer_handler_timeout() {
    let db = TestDb::new().await;
    let out = scratch_dir();
    let config = format!(
        "[handlers.slow]\ncommand = {}\ntimeout = \"60s\"\nenv = {{ OUT = {} }}\n",
        toml_list(&["sh", "-c", SLOW_SCRIPT]),
        toml_str(out.to_str().unwrap()),
    );
    db.exec("INSERT INTO job_queue (kind, timeout_secs) VALUES ('slow', 1)")
        .await;
    assert_timed_out_and_group_killed(&db, &config, 1, &out).await;
    let j = job(&db, 1).await;
    assert!(
        last_error(&j).contains("timed out after 1s"),
        "the row's 1 s limit applies, not the handler's 60 s: {:?}",
        j.last_error
    );
    std::fs::remove_dir_all(&out).ok();
}

#[tokio::test]
async fn a_program_that_does_not_exist_fails_the_job_naming_the_program() {
    let db = TestDb::new().await;
    // The worker refuses to start without its programs, so this one goes away after the start.
    let bin = scratch_dir();
    let program = bin.join("jobq-vanishing-program");
    std::fs::write(&program, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let program = program.to_str().unwrap().to_string();
    let config = format!(
        "[handlers.missing]\ncommand = {}\n",
        toml_list(&[&program, "--flag"])
    );
    let id = enqueue(&db, NewJob::new("missing")).await;
    let report = run_worker_then(&db, &config, &["default"], || {
        std::fs::remove_dir_all(&bin).unwrap();
    })
    .await;
    assert_eq!(report.retried, 1, "{report:?}");

    let j = job(&db, id).await;
    assert_eq!(j.state, State::Retry);
    assert_eq!(j.attempts, 1);
    assert!(
        last_error(&j).contains(&program),
        "last_error: {:?}",
        j.last_error
    );
}

#[tokio::test]
async fn a_command_that_exits_leaves_no_background_child_behind() {
    let db = TestDb::new().await;
    let out = scratch_dir();
    let config = format!(
        "[handlers.bg]\ncommand = {}\nenv = {{ OUT = {} }}\n",
        toml_list(&["sh", "-c", "sleep 30 & echo $! > \"$OUT/bg.pid\"; exit 0"]),
        toml_str(out.to_str().unwrap()),
    );
    let id = enqueue(&db, NewJob::new("bg")).await;
    let started = Instant::now();
    run_worker(&db, &config, &["default"]).await;
    // The sleep holds the stderr pipe: unless its group is killed, the job would wait 30 s for EOF.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "the job took {took:?}");

    let j = job(&db, id).await;
    assert_eq!(j.state, State::Done);
    assert_eq!(j.attempts, 1);
    let background = read_pid(&out.join("bg.pid"));
    wait_until(
        "the background sleep to be gone",
        Duration::from_secs(3),
        || async { !process_alive(background) },
    )
    .await;
    std::fs::remove_dir_all(&out).ok();
}

#[tokio::test]
async fn a_command_that_does_not_read_a_large_payload_still_succeeds() {
    let db = TestDb::new().await;
    let config = "[handlers.deaf]\ncommand = [\"true\"]\n";
    // Far more than a pipe buffer holds.
    let payload = serde_json::json!({ "blob": "x".repeat(1 << 20) });
    let id = enqueue(&db, NewJob::new("deaf").payload(&payload).unwrap()).await;
    run_worker(&db, config, &["default"]).await;

    let j = job(&db, id).await;
    assert_eq!(j.state, State::Done, "last_error: {:?}", j.last_error);
    assert_eq!(j.attempts, 1);
}

// ---------------------------------------------------------------------------------------------------
// SQL handlers
// ---------------------------------------------------------------------------------------------------

const SQL_CONFIG: &str = r#"
[handlers.rollup]
sql = "CALL rollup(?, ?, ?)"
params = ["day", "region", "n"]

[handlers.boom]
sql = "CALL boom(?)"
params = ["x"]
"#;

/// `$job_id`, `$claim` and `$attempt` bind the job's own facts: here what `jobq_output` takes, so a
/// statement leaves the job's output; a `$` name jobq does not know is refused with the config.
#[tokio::test]
async fn an_sql_handler_binds_the_jobs_id_claim_and_attempt_by_name() {
    let db = TestDb::new().await;
    let config = "[handlers.rollup]\nsql = \"CALL jobq_output(?, ?, ?, ?)\"\n\
                  params = [\"$job_id\", \"$claim\", \"$attempt\", \"result\"]\n";
    let id = enqueue(
        &db,
        NewJob::new("rollup")
            .payload(&serde_json::json!({"result": {"rows": 2}}))
            .unwrap(),
    )
    .await;
    let report = run_worker(&db, config, &["default"]).await;
    assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
    let output = jobq::Jobs::new(db.pool.clone()).output(id).await.unwrap();
    assert_eq!(
        output.map(|o| serde_json::from_str::<serde_json::Value>(&o).unwrap()),
        Some(serde_json::json!({"rows": 2}))
    );

    let dir = scratch_dir();
    let path = write_config(
        &dir,
        "[handlers.rollup]\nsql = \"DO ?\"\nparams = [\"$job\"]\n",
    );
    let e = format!("{:#}", Config::load(&path).unwrap_err());
    assert!(
        e.contains("\"$job\"") && e.contains("$job_id, $claim, $attempt"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

async fn sql_fixture(db: &TestDb) {
    db.exec("CREATE TABLE rollups (d DATE NOT NULL, region VARCHAR(100) NOT NULL, n INT NOT NULL)")
        .await;
    db.exec(
        "CREATE PROCEDURE rollup(IN d DATE, IN r VARCHAR(100), IN n INT) \
         INSERT INTO rollups VALUES (d, r, n)",
    )
    .await;
    db.exec(
        "CREATE PROCEDURE boom(IN x INT) \
         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom'",
    )
    .await;
}

#[tokio::test]
async fn an_sql_handler_binds_payload_fields_as_values_never_as_sql() {
    let db = TestDb::new().await;
    sql_fixture(&db).await;
    let region = "eu'; DROP TABLE rollups; --";
    let payload = serde_json::json!({"day": "2026-01-31", "region": region, "n": 5});
    let id = enqueue(&db, NewJob::new("rollup").payload(&payload).unwrap()).await;

    let report = run_worker(&db, SQL_CONFIG, &["default"]).await;
    assert_eq!(report.done, 1, "{report:?}");

    let rows: Vec<(chrono::NaiveDate, String, i32)> =
        sqlx::query_as("SELECT d, region, n FROM rollups")
            .fetch_all(&db.pool)
            .await
            .expect("the rollups table is still there");
    assert_eq!(
        rows,
        vec![(
            chrono::NaiveDate::from_ymd_opt(2026, 1, 31).unwrap(),
            region.to_string(),
            5
        )]
    );
    let j = job(&db, id).await;
    assert_eq!(j.state, State::Done);
    assert_eq!(j.attempts, 1);
    assert_eq!(j.last_error, None);
}

#[tokio::test]
async fn an_sql_job_missing_a_bound_field_is_dead_at_once() {
    let db = TestDb::new().await;
    sql_fixture(&db).await;
    let id = enqueue(
        &db,
        NewJob::new("rollup")
            .payload_json(r#"{"day": "2026-01-31", "n": 5}"#)
            .unwrap(),
    )
    .await;

    let report = run_worker(&db, SQL_CONFIG, &["default"]).await;
    assert_eq!(report.dead, 1, "{report:?}");

    let j = job(&db, id).await;
    assert_eq!(
        j.state,
        State::Dead,
        "a missing field cannot be fixed by retrying"
    );
    assert_eq!(j.attempts, 1);
    assert!(
        last_error(&j).contains("region"),
        "last_error: {:?}",
        j.last_error
    );
    let n: i64 = db.scalar("SELECT COUNT(*) FROM rollups").await;
    assert_eq!(n, 0);
}

#[tokio::test]
async fn an_sql_error_is_retried_with_the_servers_message() {
    let db = TestDb::new().await;
    sql_fixture(&db).await;
    let id = enqueue(
        &db,
        NewJob::new("boom").payload_json(r#"{"x": 1}"#).unwrap(),
    )
    .await;

    let report = run_worker(&db, SQL_CONFIG, &["default"]).await;
    assert_eq!(report.retried, 1, "{report:?}");

    let j = job(&db, id).await;
    assert_eq!(j.state, State::Retry);
    assert_eq!(j.attempts, 1);
    assert!(
        last_error(&j).contains("boom"),
        "last_error: {:?}",
        j.last_error
    );
    assert!(due_in_secs(&db, id).await > 1000);
}

#[tokio::test]
async fn an_sql_statement_over_its_timeout_is_killed_on_the_server() {
    let db = TestDb::new().await;
    let config = "[handlers.nap]\nsql = \"DO SLEEP(?)\"\nparams = [\"secs\"]\ntimeout = \"1s\"\n";
    let id = enqueue(
        &db,
        NewJob::new("nap").payload_json(r#"{"secs": 30}"#).unwrap(),
    )
    .await;

    let started = Instant::now();
    let report = run_worker(&db, config, &["default"]).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "a 1 s timeout took {took:?}");
    assert_eq!(report.retried, 1, "{report:?}");

    let j = job(&db, id).await;
    assert_eq!(j.state, State::Retry);
    assert_eq!(j.attempts, 1);
    assert!(
        last_error(&j).contains("timed out"),
        "last_error: {:?}",
        j.last_error
    );
    // KILL QUERY stopped the statement on the server too.
    let sleeping: i64 = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE DB = '{}' AND INFO LIKE 'DO SLEEP%'",
            db.name
        ))
        .await;
    assert_eq!(sleeping, 0, "the statement still runs on the server");
}

// ---------------------------------------------------------------------------------------------------
// Kinds
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_binary_worker_leaves_kinds_it_has_no_handler_for_queued() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (kind) VALUES ('a'), ('b'), ('a'), ('b')")
        .await;
    let dir = scratch_dir();
    let path = write_config(&dir, "[handlers.a]\ncommand = [\"true\"]\n");

    let out = run_jobq(
        Some(&db.url),
        &["worker", "--config", path.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}; stderr:\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let rows: Vec<(Vec<u8>, Vec<u8>, u16)> =
        sqlx::query_as("SELECT kind, state, attempts FROM job_queue ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let rows: Vec<(String, String, u16)> = rows
        .into_iter()
        .map(|(k, s, a)| {
            (
                String::from_utf8(k).unwrap(),
                String::from_utf8(s).unwrap(),
                a,
            )
        })
        .collect();
    let want = |k: &str, s: &str, a: u16| (k.to_string(), s.to_string(), a);
    assert_eq!(
        rows,
        vec![
            want("a", "done", 1),
            want("b", "queued", 0),
            want("a", "done", 1),
            want("b", "queued", 0),
        ]
    );
    let claimed: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE kind = 'b' AND claim IS NOT NULL")
        .await;
    assert_eq!(claimed, 0);
    std::fs::remove_dir_all(&dir).ok();
}

/// A command never sees jobq's own secrets (database URLs, password file, config), and
/// `inherit_env` narrows what it inherits to a list.
#[tokio::test]
async fn a_command_gets_no_jobq_secrets_and_inherit_env_narrows_its_environment() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let config = write_config(
        &dir,
        &format!(
            "[handlers.wide]\ncommand = [\"sh\", \"-c\", {wide}]\n\
             [handlers.narrow]\ncommand = [\"sh\", \"-c\", {narrow}]\ninherit_env = [\"PATH\"]\n\
             env = {{ FIXED = \"1\" }}\n",
            wide = toml_str(format!("env > {}/wide", dir.display())),
            narrow = toml_str(format!("env > {}/narrow", dir.display())),
        ),
    );
    db.exec("INSERT INTO job_queue (kind) VALUES ('wide'), ('narrow')")
        .await;
    let out = crate::common::jobq(
        Some(&db.url),
        &["worker", "--config", config.to_str().unwrap()],
    )
    .env("DATABASE_URL", &db.url)
    .env("MYSQL_PWD", "hunter2")
    .env("JOBQ_API_TOKEN", "not for jobs")
    .env("APP_SETTING", "visible")
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(db.states().await, "done=2");
    let names = |file: &str| -> Vec<String> {
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_string()))
            .collect()
    };
    let wide = names("wide");
    for secret in [
        "JOBQ_DATABASE_URL",
        "DATABASE_URL",
        "MYSQL_PWD",
        "JOBQ_API_TOKEN",
        "JOBQ_CONFIG",
    ] {
        assert!(
            !wide.iter().any(|n| n == secret),
            "{secret} leaked: {wide:?}"
        );
    }
    assert!(wide.iter().any(|n| n == "APP_SETTING"), "{wide:?}");
    assert!(wide.iter().any(|n| n == "JOBQ_JOB_ID"), "{wide:?}");
    let narrow = names("narrow");
    assert!(!narrow.iter().any(|n| n == "APP_SETTING"), "{narrow:?}");
    for wanted in ["PATH", "FIXED", "JOBQ_JOB_ID", "JOBQ_CLAIM"] {
        assert!(narrow.iter().any(|n| n == wanted), "{wanted}: {narrow:?}");
    }
}
