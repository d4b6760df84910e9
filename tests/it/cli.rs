//! The jobq binary: its commands, what they do to the database, and the messages of its errors.

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use jobq::{JobRecord, State};

use crate::common::{TestDb, jobq, run_jobq, scratch_dir, wait_output, write_config};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// No panic and no backtrace hint may reach the user, whatever went wrong.
fn assert_no_panic(out: &Output) {
    let err = stderr(out);
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "stderr shows a panic:\n{err}"
    );
}

/// Asserts exit status 0 and returns stdout.
#[track_caller]
fn assert_ok(out: &Output) -> String {
    assert_no_panic(out);
    assert!(
        out.status.success(),
        "expected success, got {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

/// Asserts a non-zero exit whose stderr contains every one of `needles`; returns stderr.
#[track_caller]
fn assert_fails(out: &Output, needles: &[&str]) -> String {
    assert_no_panic(out);
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "expected failure, got {:?}\nstdout:\n{}\nstderr:\n{err}",
        out.status,
        stdout(out)
    );
    assert_ne!(out.status.code(), Some(0));
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
    err
}

async fn count(db: &TestDb, filter: &str) -> i64 {
    db.scalar(&format!("SELECT COUNT(*) FROM job_queue WHERE {filter}"))
        .await
}

async fn job(db: &TestDb, id: u64) -> JobRecord {
    jobq::testing::get_job(&db.pool, id).await.unwrap()
}

// ---------------------------------------------------------------------------------------------------
// Reaching the database
// ---------------------------------------------------------------------------------------------------

/// With no database named anywhere jobq does not guess one (it once took root's `test` database): a
/// worker there would run, or prune, jobs nobody meant it to.
#[test]
fn a_command_with_no_database_named_says_where_to_name_one() {
    let out = run_jobq(None, &["stats"]);
    assert_fails(
        &out,
        &[
            "no database named",
            "--database-url",
            "JOBQ_DATABASE_URL",
            "DATABASE_URL",
            "./jobq.toml",
        ],
    );
    let dir = scratch_dir();
    let cfg = write_config(&dir, "[handlers.k]\ncommand = [\"true\"]\n");
    let out = run_jobq(None, &["worker", "--config", cfg.to_str().unwrap()]);
    assert_fails(&out, &["no database named", cfg.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_malformed_database_url_is_named() {
    let out = run_jobq(None, &["stats", "--database-url", "foo"]);
    assert_fails(&out, &["invalid database URL", "\"foo\"", "mysql://"]);

    let out = run_jobq(Some("foo"), &["stats"]);
    assert_fails(&out, &["invalid database URL", "\"foo\""]);

    let out = run_jobq(
        None,
        &["stats", "--database-url", "mysql://root@127.0.0.1:3306"],
    );
    assert_fails(
        &out,
        &[
            "invalid database URL",
            "mysql://root@127.0.0.1:3306",
            "no database name",
        ],
    );
}

#[test]
fn bad_bench_settings_are_named_before_anything_runs() {
    let out = run_jobq(
        Some("mysql://root@127.0.0.1:1/x"),
        &["bench", "--sweep", "1:10:10,2:lots:100"],
    );
    assert_fails(&out, &["\"2:lots:100\"", "WORKERS:CONCURRENCY:BATCH"]);
    let out = run_jobq(
        Some("mysql://root@127.0.0.1:1/x"),
        &["bench", "--steady-rates", "1000,-5"],
    );
    assert_fails(&out, &["--steady-rates", "above 0"]);
}

#[test]
fn an_unreachable_server_fails_fast_with_a_clear_message() {
    let started = Instant::now();
    let out = run_jobq(Some("mysql://root@127.0.0.1:1/x"), &["stats"]);
    let took = started.elapsed();
    assert_fails(&out, &["unreachable", "127.0.0.1:1"]);
    assert!(
        took < Duration::from_secs(5),
        "a refused connection took {took:?}"
    );
}

#[tokio::test]
async fn an_unmigrated_database_says_to_run_migrate_and_migrate_is_idempotent() {
    let db = TestDb::unmigrated().await;
    let dir = scratch_dir();
    let config = write_config(&dir, "[handlers.a]\ncommand = [\"true\"]\n");
    let config = config.to_str().unwrap();

    for args in [
        &["stats"][..],
        &["enqueue", "x"],
        &["worker", "--config", config],
        &["jobs", "list"],
        &["prune"],
    ] {
        let out = run_jobq(Some(&db.url), args);
        assert_fails(&out, &["not migrated", "jobq migrate", &db.name]);
    }
    let tables: i64 = db
        .scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
        .await;
    assert_eq!(tables, 0, "no command but migrate creates anything");

    let first = assert_ok(&run_jobq(Some(&db.url), &["migrate"]));
    assert!(first.contains("applied"), "{first}");
    let second = assert_ok(&run_jobq(Some(&db.url), &["migrate"]));
    assert!(second.contains("up to date"), "{second}");

    let names: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let names: Vec<String> = names
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect();
    for table in ["job_queue", "jobq_processes", "jobq_schema_migrations"] {
        assert!(
            names.iter().any(|n| n == table),
            "{table} missing: {names:?}"
        );
    }
    let (versions, distinct, top): (i64, i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(DISTINCT version), MAX(version) FROM jobq_schema_migrations",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(versions, distinct, "each migration is recorded once");
    assert_eq!(top, jobq::schema::latest_version());

    // And now the commands work.
    assert_ok(&run_jobq(Some(&db.url), &["stats"]));
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_payload_that_is_not_json_is_refused_and_inserts_nothing() {
    let db = TestDb::new().await;
    let out = run_jobq(Some(&db.url), &["enqueue", "k", "--payload", "{oops"]);
    assert_fails(&out, &["payload", "JSON"]);
    assert_eq!(count(&db, "1").await, 0);
}

#[tokio::test]
async fn config_errors_name_the_key_the_handler_and_the_file() {
    let db = TestDb::new().await;
    let dir = scratch_dir();

    let path = write_config(&dir, "[worker]\nconcurency = 3\n");
    let path_text = path.to_str().unwrap();
    let out = run_jobq(Some(&db.url), &["stats", "--config", path_text]);
    assert_fails(&out, &["concurency", path_text]);

    // JOBQ_CONFIG is read the same way.
    let child = jobq(Some(&db.url), &["stats"])
        .env("JOBQ_CONFIG", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(30));
    assert_fails(&out, &["concurency", path_text]);

    let path = write_config(
        &dir,
        "[handlers.resize]\ncommand = [\"true\"]\nsql = \"DO 1\"\n",
    );
    let out = run_jobq(
        Some(&db.url),
        &["worker", "--config", path.to_str().unwrap()],
    );
    assert_fails(&out, &["handlers.resize", "not both", path_text]);

    // Nothing ran and nothing was registered.
    assert_eq!(count(&db, "1").await, 0);
    let procs: i64 = db.scalar("SELECT COUNT(*) FROM jobq_processes").await;
    assert_eq!(procs, 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_subcommand_has_help() {
    for args in [
        &["migrate", "--help"][..],
        &["worker", "--help"],
        &["enqueue", "--help"],
        &["stats", "--help"],
        &["jobs", "--help"],
        &["jobs", "list", "--help"],
        &["jobs", "show", "--help"],
        &["jobs", "retry", "--help"],
        &["jobs", "run-now", "--help"],
        &["jobs", "cancel", "--help"],
        &["prune", "--help"],
    ] {
        let out = run_jobq(None, args);
        let text = assert_ok(&out);
        assert!(text.contains("Usage:"), "{args:?}:\n{text}");
        let usage = format!("jobq {}", args[..args.len() - 1].join(" "));
        assert!(text.contains(&usage), "{args:?} names `{usage}`:\n{text}");
    }

    let text = assert_ok(&run_jobq(None, &["--help"]));
    assert!(text.contains("Usage:"), "{text}");
    assert!(text.contains("JOBQ_DATABASE_URL"), "{text}");
    assert!(text.contains("finds none named says so"), "{text}");
}

// ---------------------------------------------------------------------------------------------------
// enqueue
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn enqueue_options_land_in_the_row() {
    let db = TestDb::new().await;
    let out = run_jobq(
        Some(&db.url),
        &[
            "enqueue",
            "resize",
            "--queue",
            "q1",
            "--priority",
            "-3",
            "--in",
            "1h",
            "--max-attempts",
            "4",
            "--timeout",
            "90s",
            "--payload",
            r#"{"a":1}"#,
        ],
    );
    let text = assert_ok(&out);
    let id: u64 = text
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("stdout is the id: {text:?}: {e}"));
    assert_eq!(text, format!("{id}\n"));

    let j = job(&db, id).await;
    assert_eq!(j.kind, "resize");
    assert_eq!(j.queue, "q1");
    assert_eq!(j.priority, -3);
    assert_eq!(j.max_attempts, Some(4));
    assert_eq!(j.timeout_secs, Some(90));
    assert_eq!(j.state, State::Queued);
    assert_eq!(j.attempts, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&j.payload).unwrap(),
        serde_json::json!({"a": 1})
    );
    let ahead_ms: i64 = db
        .scalar(&format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), run_at) DIV 1000 FROM job_queue WHERE id = {id}"
        ))
        .await;
    assert!(
        (3_590_000..=3_600_000).contains(&ahead_ms),
        "run_at is {ahead_ms} ms ahead, not 1 h"
    );

    let text = assert_ok(&run_jobq(
        Some(&db.url),
        &["enqueue", "resize", "--run-at", "2030-01-02T03:04:05Z"],
    ));
    let id2: u64 = text.trim().parse().unwrap();
    assert_eq!(id2, id + 1);
    let j = job(&db, id2).await;
    assert_eq!(j.run_at, Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap());
    assert_eq!(
        (j.queue.as_str(), j.priority, j.max_attempts),
        ("default", 0, None)
    );
    assert_eq!(j.timeout_secs, None);
    assert_eq!(j.payload, "{}");

    // The other documented form, in UTC.
    let text = assert_ok(&run_jobq(
        Some(&db.url),
        &["enqueue", "resize", "--run-at", "2030-01-02 03:04:05"],
    ));
    let j = job(&db, text.trim().parse().unwrap()).await;
    assert_eq!(j.run_at, Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap());

    let out = run_jobq(Some(&db.url), &["enqueue", "resize", "--run-at", "garbage"]);
    assert_fails(&out, &["--run-at", "garbage"]);
    assert_eq!(
        count(&db, "1").await,
        3,
        "a refused enqueue inserts nothing"
    );
}

#[tokio::test]
async fn enqueue_refuses_a_run_at_the_timestamp_column_cannot_hold() {
    let db = TestDb::new().await;
    // The last instant a TIMESTAMP holds on MariaDB before 11.5 and MySQL 8 is stored as it is.
    let text = assert_ok(&run_jobq(
        Some(&db.url),
        &["enqueue", "k", "--run-at", "2038-01-19T03:14:07Z"],
    ));
    let j = job(&db, text.trim().parse().unwrap()).await;
    assert_eq!(
        j.run_at,
        Utc.with_ymd_and_hms(2038, 1, 19, 3, 14, 7).unwrap()
    );

    // Past it, the job must be refused, not silently made due at once.
    let out = run_jobq(
        Some(&db.url),
        &["enqueue", "k", "--run-at", "2040-01-01T00:00:00Z"],
    );
    let due_now = count(&db, "run_at <= NOW(6) + INTERVAL 1 DAY").await;
    assert_eq!(
        due_now,
        0,
        "`enqueue --run-at 2040-01-01T00:00:00Z` inserted a job that is due now; stdout {:?}",
        stdout(&out)
    );
    assert_fails(&out, &["2040"]);
    assert_eq!(count(&db, "1").await, 1);
}

// ---------------------------------------------------------------------------------------------------
// jobs list / show / retry / cancel
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn jobs_commands_cancel_retry_show_and_list() {
    let db = TestDb::new().await;
    let text = assert_ok(&run_jobq(
        Some(&db.url),
        &["enqueue", "mail.send", "--payload", r#"{"to":"ada"}"#],
    ));
    let id: u64 = text.trim().parse().unwrap();
    let ids = id.to_string();

    let out = assert_ok(&run_jobq(Some(&db.url), &["jobs", "cancel", &ids]));
    assert!(out.contains("cancelled"), "{out}");
    let j = job(&db, id).await;
    assert_eq!(j.state, State::Cancelled);
    assert!(j.finished_at.is_some());
    assert_eq!(j.last_error.as_deref(), Some("cancelled by operator"));

    let out = run_jobq(Some(&db.url), &["jobs", "cancel", &ids]);
    assert_fails(&out, &["already finished", &ids]);
    assert_eq!(job(&db, id).await.state, State::Cancelled);

    assert_ok(&run_jobq(Some(&db.url), &["jobs", "retry", &ids]));
    let j = job(&db, id).await;
    assert_eq!(j.state, State::Queued);
    assert_eq!(j.finished_at, None);
    assert_eq!(j.attempts, 0);
    let due_in: i64 = db
        .scalar(&format!(
            "SELECT TIMESTAMPDIFF(SECOND, NOW(6), run_at) FROM job_queue WHERE id = {id}"
        ))
        .await;
    assert!(due_in <= 0, "a retried job is due now");

    // Retrying a job that is already waiting is refused, and says why.
    let out = run_jobq(Some(&db.url), &["jobs", "retry", &ids]);
    assert_fails(&out, &["already waiting"]);

    db.exec(&format!(
        "INSERT INTO jobq_attempts (job_id, attempt, outcome, claim, error) \
         VALUES ({id}, 1, 'retry', 'h:1:2:3-4:00ff', 'smtp said no')"
    ))
    .await;
    let show = assert_ok(&run_jobq(Some(&db.url), &["jobs", "show", &ids]));
    assert!(show.contains(&format!("id:           {id}")), "{show}");
    assert!(show.contains("#1   retry"), "{show}");
    assert!(show.contains("by h:1:2:3-4:00ff"), "{show}");
    assert!(show.contains("smtp said no"), "{show}");
    assert!(show.contains("state:        queued"), "{show}");
    assert!(show.contains("mail.send"), "{show}");
    assert!(show.contains("\"ada\""), "{show}");

    let list = assert_ok(&run_jobq(Some(&db.url), &["jobs", "list"]));
    let line = list
        .lines()
        .find(|l| l.split_whitespace().next() == Some(ids.as_str()))
        .unwrap_or_else(|| panic!("job {id} listed:\n{list}"));
    assert!(
        line.contains("queued") && line.contains("mail.send"),
        "{line}"
    );
    let list = assert_ok(&run_jobq(
        Some(&db.url),
        &["jobs", "list", "--state", "queued"],
    ));
    assert!(list.contains("mail.send"), "{list}");
    let list = assert_ok(&run_jobq(
        Some(&db.url),
        &["jobs", "list", "--state", "done"],
    ));
    assert!(list.contains("(no jobs)"), "{list}");

    let out = run_jobq(Some(&db.url), &["jobs", "show", "999999"]);
    assert_fails(&out, &["999999", "not found"]);
    let out = run_jobq(Some(&db.url), &["jobs", "cancel", "999999"]);
    assert_fails(&out, &["999999", "not found"]);
    let out = run_jobq(Some(&db.url), &["jobs", "list", "--state", "bogus"]);
    assert_fails(&out, &["bogus", "state"]);
    assert_eq!(count(&db, "1").await, 1);
}

// ---------------------------------------------------------------------------------------------------
// stats
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn stats_prints_each_queue_with_its_counts() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, queue, state, run_at, finished_at) VALUES \
         ('k', 'alpha', 'queued', NOW(6) - INTERVAL 5 SECOND, NULL), \
         ('k', 'alpha', 'queued', NOW(6), NULL), \
         ('k', 'alpha', 'done', NOW(6), NOW(6)), \
         ('k', 'beta', 'dead', NOW(6), NOW(6)), \
         ('k', 'beta', 'retry', NOW(6) + INTERVAL 1 HOUR, NULL), \
         ('k', 'beta', 'cancelled', NOW(6), NOW(6)), \
         ('k', 'beta', 'running', NOW(6), NULL)",
    )
    .await;
    let text = assert_ok(&run_jobq(Some(&db.url), &["stats"]));
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header[..10],
        [
            "QUEUE",
            "QUEUED",
            "RUNNING",
            "DONE",
            "RETRY",
            "DEAD",
            "CANCELLED",
            "WAITING",
            "DUE",
            "OLDEST"
        ],
        "{text}"
    );
    let row = |queue: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(queue))
            .unwrap_or_else(|| panic!("no line for {queue}:\n{text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    //                 queued running done retry dead cancelled waiting due
    assert_eq!(
        row("alpha")[1..9],
        ["2", "0", "1", "0", "0", "0", "0", "2"],
        "{text}"
    );
    assert_eq!(
        row("beta")[1..9],
        ["0", "1", "0", "1", "1", "1", "0", "0"],
        "{text}"
    );
    assert_eq!(row("beta")[9], "-", "{text}");
    let oldest: f64 = row("alpha")[9].trim_end_matches('s').parse().unwrap();
    assert!(
        (4.0..60.0).contains(&oldest),
        "oldest due {oldest}s:\n{text}"
    );
    assert!(text.contains("no live jobq processes"), "{text}");
}

// ---------------------------------------------------------------------------------------------------
// prune
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn prune_deletes_finished_jobs_past_the_retention_only() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, state, finished_at) VALUES \
         ('old', 'done', NOW(6) - INTERVAL 2 DAY), \
         ('old', 'done', NOW(6) - INTERVAL 2 DAY), \
         ('old', 'dead', NOW(6) - INTERVAL 2 DAY), \
         ('old', 'cancelled', NOW(6) - INTERVAL 2 DAY), \
         ('new', 'done', NOW(6) - INTERVAL 1 HOUR), \
         ('new', 'dead', NOW(6) - INTERVAL 1 HOUR), \
         ('open', 'queued', NULL), \
         ('open', 'retry', NULL)",
    )
    .await;
    let text = assert_ok(&run_jobq(Some(&db.url), &["prune", "--retention", "1d"]));
    assert!(text.contains("deleted 4 "), "{text}");
    assert_eq!(count(&db, "kind = 'old'").await, 0);
    assert_eq!(count(&db, "kind = 'new'").await, 2);
    assert_eq!(count(&db, "kind = 'open'").await, 2);
}

#[tokio::test]
async fn prune_deletes_more_than_one_batch() {
    let db = TestDb::new().await;
    db.insert_jobs("old", 2_500).await;
    db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6) - INTERVAL 2 DAY")
        .await;
    db.exec(
        "INSERT INTO job_queue (kind, state, finished_at) VALUES ('new', 'done', NOW(6) - INTERVAL 1 HOUR)",
    )
    .await;
    let text = assert_ok(&run_jobq(Some(&db.url), &["prune", "--retention", "1d"]));
    assert!(text.contains("deleted 2500 "), "{text}");
    assert_eq!(count(&db, "kind = 'old'").await, 0);
    assert_eq!(count(&db, "kind = 'new'").await, 1);
}

// ---------------------------------------------------------------------------------------------------
// Where the database URL comes from
// ---------------------------------------------------------------------------------------------------

/// Runs `jobq stats` with the given URL sources; None leaves a source unset.
fn stats_with(
    flag: Option<&str>,
    jobq_env: Option<&str>,
    database_url_env: Option<&str>,
    config_url: Option<&str>,
) -> Output {
    let dir = scratch_dir();
    let mut args = vec!["stats".to_string()];
    if let Some(u) = flag {
        args.extend(["--database-url".to_string(), u.to_string()]);
    }
    let config_text = match config_url {
        Some(u) => format!("database_url = {}\n", serde_json::to_string(u).unwrap()),
        None => String::new(),
    };
    let path = write_config(&dir, &config_text);
    args.extend(["--config".to_string(), path.to_str().unwrap().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = jobq(None, &args);
    if let Some(u) = jobq_env {
        cmd.env("JOBQ_DATABASE_URL", u);
    }
    if let Some(u) = database_url_env {
        cmd.env("DATABASE_URL", u);
    }
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(30));
    std::fs::remove_dir_all(&dir).ok();
    out
}

#[tokio::test]
async fn database_url_precedence_flag_then_jobq_env_then_database_url_env_then_config() {
    let db = TestDb::new().await;
    let good = db.url.as_str();
    let (head, _) = good.rsplit_once('/').unwrap();
    let bad = |what: &str| format!("{head}/jobq_missing_{what}");
    let (flag, env, dburl, cfg) = (
        bad("flag"),
        bad("jobq_env"),
        bad("dburl_env"),
        bad("config"),
    );

    // The flag beats everything.
    assert_ok(&stats_with(
        Some(good),
        Some(&env),
        Some(&dburl),
        Some(&cfg),
    ));
    assert_fails(
        &stats_with(Some(&flag), Some(good), Some(good), Some(good)),
        &["jobq_missing_flag"],
    );
    // JOBQ_DATABASE_URL beats DATABASE_URL and the config.
    assert_ok(&stats_with(None, Some(good), Some(&dburl), Some(&cfg)));
    assert_fails(
        &stats_with(None, Some(&env), Some(good), Some(good)),
        &["jobq_missing_jobq_env"],
    );
    // DATABASE_URL beats the config.
    assert_ok(&stats_with(None, None, Some(good), Some(&cfg)));
    assert_fails(
        &stats_with(None, None, Some(&dburl), Some(good)),
        &["jobq_missing_dburl_env"],
    );
    // The config is used when nothing else names a database.
    assert_ok(&stats_with(None, None, None, Some(good)));
    assert_fails(
        &stats_with(None, None, None, Some(&cfg)),
        &["jobq_missing_config"],
    );
}

/// A lease that would judge live workers dead between two heartbeats, and a fence shorter than three
/// heartbeats, are refused before anything runs, naming the setting.
#[tokio::test]
async fn a_lease_or_fence_too_short_for_the_heartbeat_is_refused() {
    let db = TestDb::new().await;
    let out = run_jobq(Some(&db.url), &["reaper", "--once", "--lease", "1s"]);
    assert_fails(
        &out,
        &["reaper lease: 1s", "three worker heartbeat intervals"],
    );
    assert_eq!(out.status.code(), Some(1));
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[worker]\nheartbeat_interval = \"2s\"\n[reaper]\nlease = \"5s\"\n",
    );
    let out = run_jobq(
        Some(&db.url),
        &["reaper", "--once", "--config", cfg.to_str().unwrap()],
    );
    assert_fails(&out, &["reaper lease: 5s", "at least 6s"]);
    let cfg = write_config(
        &dir,
        "[worker]\nheartbeat_interval = \"2s\"\nfence_after = \"5s\"\n\
         [handlers.k]\ncommand = [\"true\"]\n",
    );
    let out = run_jobq(
        Some(&db.url),
        &["worker", "--config", cfg.to_str().unwrap()],
    );
    assert_fails(
        &out,
        &["worker fence_after: 5s", "three heartbeat intervals"],
    );
}

// ---------------------------------------------------------------------------------------------------
// Closed pipes: `jobq jobs list | head`, `jobq worker 2>&1 | logger` whose reader died
// ---------------------------------------------------------------------------------------------------

/// The write end of a pipe whose read end is already closed: every write to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Stdio::from(writer)
}

/// Exit status 101 is a panic; 134 an abort.
#[track_caller]
fn assert_clean_exit(out: &Output, what: &str) {
    assert_no_panic(out);
    assert!(
        out.status.success(),
        "{what} exited with {:?}\nstderr:\n{}",
        out.status,
        stderr(out)
    );
}

#[tokio::test]
async fn a_worker_whose_log_pipe_is_closed_still_runs_its_jobs() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let config = write_config(&dir, "[handlers.k]\ncommand = [\"true\"]\n");
    db.insert_jobs("k", 3).await;
    // -v: plenty of log lines, each one a failed write.
    let child = jobq(
        Some(&db.url),
        &["worker", "-v", "--config", config.to_str().unwrap()],
    )
    .stdout(closed_pipe())
    .stderr(closed_pipe())
    .spawn()
    .unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert_clean_exit(&out, "a drain worker with closed stdout and stderr");
    assert_eq!(db.states().await, "done=3");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn listings_end_quietly_when_stdout_is_closed() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 30).await;
    let id: u64 = db.scalar("SELECT MIN(id) FROM job_queue").await;
    let id = id.to_string();
    for args in [
        &["jobs", "list"][..],
        &["jobs", "show", &id],
        &["stats"],
        &["schedule", "list"],
        &["schedule", "next", "--spec", "every 5m"],
        &["enqueue", "k"],
    ] {
        let child = jobq(Some(&db.url), args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait_output(child, Duration::from_secs(30));
        assert_clean_exit(&out, &format!("jobq {}", args.join(" ")));
        assert_eq!(
            stderr(&out),
            "",
            "jobq {}: nothing to report",
            args.join(" ")
        );
    }
    // Errors still reach stderr, and a closed stderr does not turn them into a panic either.
    let child = jobq(Some(&db.url), &["jobs", "show", "999999"])
        .stdout(closed_pipe())
        .stderr(closed_pipe())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{:?}", out.status);
}

// ---------------------------------------------------------------------------------------------------
// Refusals: bad input is an error that names it, with exit status 1 (2 for usage errors), never a crash
// ---------------------------------------------------------------------------------------------------

/// A server that refuses connections: a refusal that names the bad input proves it came before any
/// connection attempt.
const NO_SERVER: &str = "mysql://root@127.0.0.1:1/x";

/// Asserts exit status 1 and that stderr contains every one of `needles`.
#[track_caller]
fn assert_refused(out: &Output, needles: &[&str]) {
    assert_fails(out, needles);
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit status; stderr:\n{}",
        stderr(out)
    );
}

/// `jobq ARGS --config FILE` with `text` as the file.
fn with_config(text: &str, args: &[&str]) -> Output {
    let dir = scratch_dir();
    let path = write_config(&dir, text);
    let mut all = args.to_vec();
    all.extend(["--config", path.to_str().unwrap()]);
    let out = run_jobq(Some(NO_SERVER), &all);
    std::fs::remove_dir_all(&dir).ok();
    out
}

const A_HANDLER: &str = "[handlers.k]\ncommand = [\"true\"]\n";

#[test]
fn an_invalid_jobq_log_is_refused() {
    let child = jobq(Some(NO_SERVER), &["stats"])
        .env("JOBQ_LOG", "jobq=loud")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(30));
    assert_refused(&out, &["invalid JOBQ_LOG", "jobq=loud"]);
}

/// A bad flag value is a usage error: clap's message names the flag, and the exit status is 2.
fn assert_usage_error(out: &Output, needles: &[&str]) {
    assert_fails(out, needles);
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit status; stderr:\n{}",
        stderr(out)
    );
}

#[test]
fn a_zero_reaper_interval_or_lease_is_refused() {
    let out = run_jobq(Some(NO_SERVER), &["reaper", "--interval", "0s"]);
    assert_usage_error(&out, &["--interval", "must be above zero"]);
    let out = run_jobq(Some(NO_SERVER), &["reaper", "--once", "--lease", "0s"]);
    assert_usage_error(&out, &["--lease", "must be above zero"]);
    let out = with_config("[reaper]\ninterval = \"0s\"\n", &["reaper"]);
    assert_refused(&out, &["reaper.interval must be above zero"]);
}

#[test]
fn zero_scheduler_settings_are_refused() {
    let out = run_jobq(Some(NO_SERVER), &["scheduler", "--interval", "0s"]);
    assert_usage_error(&out, &["--interval", "must be above zero"]);
    let out = run_jobq(Some(NO_SERVER), &["scheduler", "--max-jobs-per-tick", "0"]);
    assert_usage_error(&out, &["--max-jobs-per-tick", "0"]);
    let out = with_config("[scheduler]\nmax_jobs_per_tick = 0\n", &["scheduler"]);
    assert_refused(&out, &["scheduler.max_jobs_per_tick must be at least 1"]);
}

#[test]
fn zero_worker_intervals_are_refused() {
    let out = with_config(A_HANDLER, &["worker", "--poll-interval", "0s"]);
    assert_usage_error(&out, &["--poll-interval", "must be above zero"]);
    let out = with_config(A_HANDLER, &["worker", "--batch-size", "0"]);
    assert_usage_error(&out, &["--batch-size", "0"]);
    let out = with_config(
        &format!("{A_HANDLER}[worker]\nheartbeat_interval = \"0s\"\n"),
        &["worker"],
    );
    assert_refused(&out, &["worker.heartbeat_interval must be above zero"]);
    let out = with_config(
        &format!("{A_HANDLER}[worker]\npoll_interval = \"0s\"\n"),
        &["supervise", "-n", "1"],
    );
    assert_refused(&out, &["worker.poll_interval must be above zero"]);
}

#[test]
fn an_absurd_concurrency_is_refused_not_allocated() {
    let out = with_config(A_HANDLER, &["worker", "-c", "4000000000"]);
    assert_usage_error(&out, &["--concurrency", "4000000000", "maximum of 10000"]);
    let out = with_config(A_HANDLER, &["supervise", "-n", "4000000000"]);
    assert_usage_error(&out, &["--workers", "4000000000", "1..=1000"]);
    let out = with_config(A_HANDLER, &["supervise", "-n", "0"]);
    assert_usage_error(&out, &["--workers", "0"]);
    let out = with_config(A_HANDLER, &["supervise", "-c", "4000000000"]);
    assert_usage_error(&out, &["--concurrency", "4000000000", "maximum of 10000"]);
    let out = with_config(A_HANDLER, &["worker", "-c", "0"]);
    assert_usage_error(&out, &["--concurrency", "at least 1"]);
    let out = with_config(
        &format!("{A_HANDLER}[worker]\nconcurrency = 20000\n"),
        &["worker"],
    );
    assert_refused(&out, &["worker.concurrency = 20000", "maximum of 10000"]);
}

#[test]
fn a_retry_cap_below_its_base_is_refused() {
    let out = with_config(
        &format!("{A_HANDLER}[retry]\nbase = \"10m\"\ncap = \"1m\"\n"),
        &["worker"],
    );
    assert_refused(&out, &["retry.cap (1m) is below retry.base (10m)"]);
}

#[test]
fn jobs_list_with_a_zero_limit_is_refused() {
    let out = run_jobq(Some(NO_SERVER), &["jobs", "list", "-n", "0"]);
    assert_usage_error(&out, &["--limit", "0"]);
}

#[test]
fn a_handler_program_that_cannot_run_is_refused_when_the_worker_starts() {
    let out = with_config(
        "[handlers.resize]\ncommand = [\"/nonexistent/resize-image\"]\n",
        &["worker"],
    );
    assert_refused(
        &out,
        &[
            "handlers.resize",
            "\"/nonexistent/resize-image\" does not exist",
        ],
    );

    let out = with_config(
        "[handlers.resize]\ncommand = [\"resize-image-not-installed\"]\n",
        &["worker", "--forever"],
    );
    assert_refused(
        &out,
        &[
            "handlers.resize",
            "\"resize-image-not-installed\" is not found on PATH",
        ],
    );

    // The handler's own PATH is the one searched.
    let out = with_config(
        "[handlers.resize]\ncommand = [\"sh\"]\nenv = { PATH = \"/nonexistent\" }\n",
        &["supervise", "-n", "1"],
    );
    assert_refused(&out, &["handlers.resize", "(/nonexistent)"]);

    let dir = scratch_dir();
    let script = dir.join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let out = with_config(
        &format!(
            "[handlers.resize]\ncommand = [{}]\n",
            serde_json::to_string(script.to_str().unwrap()).unwrap()
        ),
        &["worker"],
    );
    assert_refused(&out, &["handlers.resize", "is not executable (mode 644)"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_schedule_config_error_is_refused() {
    let out = with_config(
        &format!("{A_HANDLER}[schedules.nightly]\nkind = \"k\"\nspec = \"every banana\"\n"),
        &["scheduler"],
    );
    assert_refused(&out, &["schedules.nightly", "every banana"]);
    let out = with_config(
        &format!("{A_HANDLER}[schedules.nightly]\nkind = \"k\"\nspec = \"every banana\"\n"),
        &["worker"],
    );
    assert_refused(&out, &["schedules.nightly"]);
}

#[test]
fn usage_errors_exit_2_and_other_errors_exit_1() {
    let out = run_jobq(Some(NO_SERVER), &["worker", "--concurrency", "lots"]);
    assert_fails(&out, &["--concurrency", "lots"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = run_jobq(Some(NO_SERVER), &["no-such-command"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = run_jobq(Some(NO_SERVER), &["stats"]);
    assert_refused(&out, &["unreachable"]);
}

// ---------------------------------------------------------------------------------------------------
// Kinds match exactly
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_padded_kind_stays_queued_and_stats_names_it() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let config = write_config(&dir, "[handlers.quick]\ncommand = [\"true\"]\n");
    let config = config.to_str().unwrap();
    // 'quick ' = 'quick' under the column's PAD SPACE collation; the worker must not take it.
    db.exec("INSERT INTO job_queue (kind) VALUES ('quick '), ('quick'), ('quick')")
        .await;
    assert_ok(&run_jobq(Some(&db.url), &["worker", "--config", config]));
    assert_eq!(db.states().await, "done=2 queued=1");
    assert_eq!(
        count(
            &db,
            "state = 'queued' AND attempts = 0 AND kind LIKE 'quick %'"
        )
        .await,
        1
    );

    let text = assert_ok(&run_jobq(Some(&db.url), &["stats", "--config", config]));
    let line = text
        .lines()
        .find(|l| l.contains("\"quick \""))
        .unwrap_or_else(|| panic!("no due line for \"quick \":\n{text}"));
    assert_eq!(line.split_whitespace().next(), Some("default"), "{text}");
    assert!(
        text.contains(
            "warning: 1 due job(s) of kind \"quick \" in queue default will never be claimed"
        ),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------------
// jobs retry: a fresh attempt budget; jobs run-now
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn retrying_a_dead_job_gives_it_all_its_attempts_again() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, state, attempts, max_attempts, last_error, finished_at) \
         VALUES ('k', 'dead', 3, 3, 'boom: disk full', NOW(6))",
    )
    .await;
    let id: u64 = db.scalar("SELECT MAX(id) FROM job_queue").await;
    let text = assert_ok(&run_jobq(
        Some(&db.url),
        &["jobs", "retry", &id.to_string()],
    ));
    assert!(text.contains("fresh attempt budget"), "{text}");
    let j = job(&db, id).await;
    assert_eq!(j.state, State::Queued);
    assert_eq!(
        (j.attempts, j.max_attempts),
        (0, Some(3)),
        "all 3 attempts again"
    );
    assert_eq!(j.finished_at, None);
    let err = j.last_error.unwrap_or_default();
    assert!(
        err.starts_with("retried by operator after 3 attempt(s)")
            && err.contains("boom: disk full"),
        "history kept in last_error: {err}"
    );
}

/// `jobs retry` and `jobs run-now` clear a token that plain SQL left on a row that is not running, so
/// the row no longer looks claimed while it waits.
#[tokio::test]
async fn retry_and_run_now_clear_a_stale_claim() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (id, kind, state, attempts, run_at, finished_at, claim) VALUES \
         (1, 'k', 'queued', 0, NOW(6) + INTERVAL 1 DAY, NULL, 'gone-1'), \
         (2, 'k', 'queued', 0, NOW(6) - INTERVAL 1 SECOND, NULL, 'gone-2'), \
         (3, 'k', 'dead', 3, NOW(6), NOW(6), 'gone-3')",
    )
    .await;
    for (verb, id) in [("run-now", "1"), ("run-now", "2"), ("retry", "3")] {
        assert_ok(&run_jobq(Some(&db.url), &["jobs", verb, id]));
    }
    assert_eq!(count(&db, "claim IS NOT NULL").await, 0);
    assert_eq!(count(&db, "state = 'queued' AND run_at <= NOW(6)").await, 3);
}

#[tokio::test]
async fn run_now_makes_a_waiting_job_due_and_refuses_running_and_finished_ones() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (id, kind, state, attempts, run_at, finished_at, claim) VALUES \
         (1, 'k', 'queued', 0, NOW(6) + INTERVAL 1 DAY, NULL, NULL), \
         (2, 'k', 'retry', 2, NOW(6) + INTERVAL 1 HOUR, NULL, NULL), \
         (3, 'k', 'running', 1, NOW(6), NULL, 'someone'), \
         (4, 'k', 'done', 1, NOW(6), NOW(6), NULL), \
         (5, 'k', 'queued', 0, NOW(6) - INTERVAL 1 SECOND, NULL, NULL)",
    )
    .await;
    let due = |id: u64| {
        let db = &db;
        async move { count(db, &format!("id = {id} AND run_at <= NOW(6)")).await == 1 }
    };
    for id in [1u64, 2] {
        let text = assert_ok(&run_jobq(
            Some(&db.url),
            &["jobs", "run-now", &id.to_string()],
        ));
        assert!(text.contains("is due now"), "{text}");
        assert!(due(id).await, "job {id} is due");
    }
    assert_eq!(job(&db, 2).await.attempts, 2, "attempts are unchanged");
    assert_eq!(job(&db, 2).await.state, State::Retry);

    let text = assert_ok(&run_jobq(Some(&db.url), &["jobs", "run-now", "5"]));
    assert!(text.contains("already due"), "{text}");

    let out = run_jobq(Some(&db.url), &["jobs", "run-now", "3"]);
    assert_refused(&out, &["job 3 is running"]);
    let out = run_jobq(Some(&db.url), &["jobs", "run-now", "4"]);
    assert_refused(&out, &["job 4 is done", "jobq jobs retry"]);
    let out = run_jobq(Some(&db.url), &["jobs", "run-now", "999"]);
    assert_refused(&out, &["999", "not found"]);
    assert_eq!(job(&db, 3).await.state, State::Running);
    assert_eq!(job(&db, 4).await.state, State::Done);
}

// ---------------------------------------------------------------------------------------------------
// Secrets and hostile rows
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_database_password_can_come_from_a_file() {
    let db = TestDb::new().await;
    let user = format!("jobq_pw_{}", rand::random::<u32>());
    // Characters that would break a URL if they were not encoded.
    let password = "s3cr@t:/pw %?#";
    for host in ["127.0.0.1", "localhost", "%"] {
        db.exec(&format!(
            "CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'"
        ))
        .await;
        db.exec(&format!(
            "GRANT ALL ON `{}`.* TO '{user}'@'{host}'",
            db.name
        ))
        .await;
    }
    let (_, rest) = db.url.split_once("://").unwrap();
    let (_, host) = rest.rsplit_once('@').unwrap();
    let url = format!("mysql://{user}@{host}");
    let dir = scratch_dir();
    let pw_file = dir.join("db-password");
    std::fs::write(&pw_file, format!("{password}\n")).unwrap();

    // Without the password: refused by the server.
    assert_fails(&run_jobq(Some(&url), &["stats"]), &["access denied"]);
    // JOBQ_DATABASE_PASSWORD_FILE.
    let run = |envs: &[(&str, &std::path::Path)], args: &[&str]| {
        let mut cmd = jobq(Some(&url), args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_output(child, Duration::from_secs(30))
    };
    assert_ok(&run(
        &[("JOBQ_DATABASE_PASSWORD_FILE", &pw_file)],
        &["stats"],
    ));
    // database_password_file in the config, and the URL's own (wrong) password is replaced.
    let config = write_config(
        &dir,
        &format!(
            "database_password_file = {}\n",
            serde_json::to_string(pw_file.to_str().unwrap()).unwrap()
        ),
    );
    let wrong = format!("mysql://{user}:wrong@{host}");
    let out = run_jobq(
        None,
        &[
            "stats",
            "--database-url",
            &wrong,
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert_ok(&out);
    // A missing file is an error naming it, before any connection.
    let missing = dir.join("no-such-file");
    let out = run(&[("JOBQ_DATABASE_PASSWORD_FILE", &missing)], &["stats"]);
    assert_refused(
        &out,
        &[
            "cannot read the database password file",
            missing.to_str().unwrap(),
        ],
    );
    assert!(!stderr(&out).contains(password));

    for host in ["127.0.0.1", "localhost", "%"] {
        db.exec(&format!("DROP USER '{user}'@'{host}'")).await;
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn jobs_list_and_show_never_print_a_rows_control_characters() {
    let db = TestDb::new().await;
    // A kind that clears the screen, an error that sets the terminal's title and rings its bell, a
    // payload whose JSON escapes decode to an escape sequence.
    db.exec(
        "INSERT INTO job_queue (kind, state, last_error, payload, finished_at) VALUES \
         (CONCAT('evil', CHAR(27), '[2J'), 'dead', \
          CONCAT('boom', CHAR(27), ']0;pwned', CHAR(7), '\\nsecond\\tline', CHAR(27), '[1A'), \
          '{\"x\": \"\\\\u001b[31mred\"}', NOW(6))",
    )
    .await;
    let id: u64 = db.scalar("SELECT MAX(id) FROM job_queue").await;
    let list = run_jobq(Some(&db.url), &["jobs", "list"]);
    let show = run_jobq(Some(&db.url), &["jobs", "show", &id.to_string()]);
    for (what, out) in [("list", &list), ("show", &show)] {
        let text = assert_ok(out);
        assert!(
            !out.stdout.iter().any(|b| *b == 0x1b || *b == 0x07),
            "jobs {what} printed a control character:\n{text:?}"
        );
        assert!(text.contains("evil\\x1b[2J"), "jobs {what}: {text}");
        assert!(
            text.contains("boom\\x1b]0;pwned\\x07"),
            "jobs {what}: {text}"
        );
    }
    let show = stdout(&show);
    // Multi-line fields keep their lines and tabs.
    assert!(
        show.contains("\n              second\tline\\x1b[1A"),
        "{show}"
    );
    assert!(show.contains("\\u001b[31mred"), "{show}");
}

/// The defaults `--help` states are the library's constants, not copies that can drift.
#[test]
fn help_states_the_librarys_defaults() {
    let human = |d: Duration| humantime::format_duration(d).to_string();
    let worker = stdout(&jobq(None, &["worker", "--help"]).output().unwrap());
    let flat = worker.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        format!(
            "one worker process (at most {}). Default {}",
            jobq::WorkerConfig::MAX_CONCURRENCY,
            jobq::WorkerConfig::DEFAULT_CONCURRENCY
        ),
        format!(
            "after SIGTERM/SIGINT. Default {}",
            human(jobq::WorkerConfig::DEFAULT_SHUTDOWN_GRACE)
        ),
        format!(
            "handler sets none. Default {}",
            human(jobq::WorkerConfig::DEFAULT_TIMEOUT)
        ),
    ] {
        assert!(flat.contains(&want), "{want:?} not in:\n{worker}");
    }
    let reaper = stdout(&jobq(None, &["reaper", "--help"]).output().unwrap());
    let flat = reaper.split_whitespace().collect::<Vec<_>>().join(" ");
    let want = format!("else {}", human(jobq::ReaperConfig::DEFAULT_LEASE));
    assert!(flat.contains(&want), "{want:?} not in:\n{reaper}");
    let scheduler = stdout(&jobq(None, &["scheduler", "--help"]).output().unwrap());
    let flat = scheduler.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        format!("else {}", human(jobq::SchedulerConfig::DEFAULT_INTERVAL)),
        format!("else {}", jobq::SchedulerConfig::DEFAULT_MAX_JOBS_PER_TICK),
    ] {
        assert!(flat.contains(&want), "{want:?} not in:\n{scheduler}");
    }
}

#[tokio::test]
async fn jobs_bulk_counts_without_yes_acts_with_it_and_says_what_it_refused() {
    let db = TestDb::new().await;
    db.insert_jobs("mail", 6).await;
    db.exec(
        "UPDATE job_queue SET state = 'dead', attempts = 20, last_error = 'smtp 550' WHERE id <= 3",
    )
    .await;
    db.exec("UPDATE job_queue SET last_error = 'smtp 550' WHERE id = 4")
        .await;

    let dry = assert_ok(&run_jobq(
        Some(&db.url),
        &["jobs", "bulk", "retry", "--error", "smtp"],
    ));
    assert!(
        dry.contains("4 job(s) match; run again with --yes"),
        "{dry}"
    );
    assert_eq!(db.states().await, "dead=3 queued=3");

    let out = assert_ok(&run_jobq(
        Some(&db.url),
        &["jobs", "bulk", "retry", "--error", "smtp", "--yes"],
    ));
    assert!(out.contains("retry: 3 of 4 job(s)"), "{out}");
    assert!(out.contains("1 refused; the first: job 4"), "{out}");
    assert_eq!(db.states().await, "queued=6");

    let out = run_jobq(
        Some(&db.url),
        &[
            "jobs", "bulk", "delete", "--state", "queued", "--limit", "5", "--yes",
        ],
    );
    assert_fails(&out, &["more than 5 jobs match"]);
    assert_eq!(db.states().await, "queued=6");
    let out = run_jobq(Some(&db.url), &["jobs", "bulk", "explode"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("explode"));
}

/// Without a filter, `jobs bulk` takes every job only when told `--all`; `--all` with a filter is a
/// usage error, and an unknown flag (a typo of a filter) never reaches the database.
#[tokio::test]
async fn jobs_bulk_without_a_filter_needs_all() {
    let db = TestDb::new().await;
    db.insert_jobs("mail", 4).await;
    let out = run_jobq(Some(&db.url), &["jobs", "bulk", "delete", "--yes"]);
    assert_fails(&out, &["every job", "--all"]);
    let out = run_jobq(
        Some(&db.url),
        &["jobs", "bulk", "delete", "--stat", "dead", "--yes"],
    );
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stat"));
    let out = run_jobq(
        Some(&db.url),
        &[
            "jobs", "bulk", "delete", "--all", "--state", "dead", "--yes",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert_eq!(db.states().await, "queued=4");
    let out = assert_ok(&run_jobq(
        Some(&db.url),
        &["jobs", "bulk", "delete", "--all", "--yes"],
    ));
    assert!(out.contains("delete: 4 of 4 job(s)"), "{out}");
    assert_eq!(db.states().await, "");
}

// ---------------------------------------------------------------------------------------------------
// the audit trail
// ---------------------------------------------------------------------------------------------------

/// The (actor, action, target, affected) rows of `jobq_audit`, oldest first.
async fn audit_rows(db: &TestDb) -> Vec<(String, String, String, u64)> {
    sqlx::query_as(
        "SELECT CAST(actor AS CHAR), CAST(action AS CHAR), CAST(target AS CHAR), affected \
         FROM jobq_audit ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Each change an operator makes with the CLI is in the audit trail under `$USER@host`, as the
/// dashboard's are under its user; reads leave nothing, and a refused change leaves nothing.
#[tokio::test]
async fn operator_commands_are_audited_under_the_os_user() {
    let db = TestDb::new().await;
    let id: u64 = assert_ok(&run_jobq(Some(&db.url), &["enqueue", "mail.send"]))
        .trim()
        .parse()
        .unwrap();
    let ids = id.to_string();
    let as_ada = |args: &[&str]| {
        let child = jobq(Some(&db.url), args)
            .env("USER", "ada")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn jobq");
        assert_ok(&wait_output(child, Duration::from_secs(60)))
    };
    as_ada(&["jobs", "cancel", &ids]);
    as_ada(&["jobs", "list"]);
    as_ada(&["jobs", "bulk", "retry", "--state", "cancelled", "--yes"]);
    as_ada(&["queue", "pause", "mail"]);
    as_ada(&["queue", "resume", "mail"]);
    as_ada(&["limit", "set", "--kind", "mail.send", "3"]);
    as_ada(&["limit", "remove", "--kind", "mail.send"]);
    as_ada(&["scale", "-n", "4"]);
    as_ada(&["scale", "--reset"]);
    as_ada(&["stats"]);
    let refused = jobq(Some(&db.url), &["jobs", "retry", &ids])
        .env("USER", "ada")
        .output()
        .unwrap();
    assert!(!refused.status.success(), "a queued job cannot be retried");

    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let ada = format!("ada@{host}");
    let rows = audit_rows(&db).await;
    let expected: Vec<(String, String, String, u64)> = [
        ("job.cancel", ids.as_str(), 1),
        ("jobs.retry", "filter state=\"cancelled\"", 1),
        ("queue.pause", "mail", 1),
        ("queue.resume", "mail", 1),
        ("limit.set", "kind mail.send to 3", 1),
        ("limit.remove", "kind mail.send", 1),
        ("scale.set", "every host to 4", 1),
        ("scale.reset", "every count", 1),
    ]
    .into_iter()
    .map(|(a, t, n)| (ada.clone(), a.to_string(), t.to_string(), n))
    .collect();
    assert_eq!(rows, expected);
}

/// The library's facades leave entries only when told who acts (`by`): a program's routine changes
/// are not an operator's.
#[tokio::test]
async fn the_library_audits_only_what_a_named_actor_does() {
    let db = TestDb::new().await;
    let a = jobq::enqueue(&db.pool, &jobq::NewJob::new("k"))
        .await
        .unwrap();
    let b = jobq::enqueue(&db.pool, &jobq::NewJob::new("k"))
        .await
        .unwrap();
    jobq::Jobs::new(db.pool.clone()).cancel(a).await.unwrap();
    assert!(audit_rows(&db).await.is_empty());
    let jobs = jobq::Jobs::new(db.pool.clone()).by("billing-service");
    jobs.cancel(b).await.unwrap();
    let outcome = jobs
        .apply_each(
            jobq::admin::JobAction::Retry,
            &[a, b, jobq::JobId::from(999_999)],
            |_, _| {},
        )
        .await;
    assert_eq!(
        (outcome.matched, outcome.done, outcome.refused.len()),
        (3, 2, 1)
    );
    assert!(outcome.stopped.is_none());
    let rows = audit_rows(&db).await;
    assert_eq!(
        rows,
        vec![
            (
                "billing-service".into(),
                "job.cancel".into(),
                b.to_string(),
                1
            ),
            (
                "billing-service".into(),
                "jobs.retry".into(),
                format!("{a},{b},999999"),
                2
            ),
        ]
    );
}
