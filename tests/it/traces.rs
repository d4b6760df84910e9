//! Trace context (schema 25): a `traceparent` captured at enqueue from the library, the CLI (flag and
//! environment) and plain SQL, refused when malformed at the door and tolerated when it got in anyway,
//! handed to every kind of handler, shown by `jobs show`, `--json` and the job page, and free for the
//! claim.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use jobq::config::Config;
use jobq::{JobContext, JobError, Mode, NewJob, State, Worker, WorkerConfig};

use crate::common::{
    TestDb, claim_selects, jobq, run_jobq, scratch_dir, wait_output, write_config,
};

/// The example of the W3C spec.
pub(crate) const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn stored(db: &TestDb, id: u64) -> Option<String> {
    let v: Option<Vec<u8>> = db
        .scalar(&format!(
            "SELECT traceparent FROM job_queue WHERE id = {id}"
        ))
        .await;
    v.map(|b| String::from_utf8(b).unwrap())
}

#[tokio::test]
async fn the_library_and_the_cli_store_it_and_refuse_a_malformed_one() {
    let db = TestDb::new().await;
    let id = jobq::enqueue(&db.pool, &NewJob::new("k").traceparent(PARENT).unwrap())
        .await
        .unwrap();
    assert_eq!(stored(&db, id.0).await.as_deref(), Some(PARENT));
    let plain = jobq::enqueue(&db.pool, &NewJob::new("k")).await.unwrap();
    assert_eq!(stored(&db, plain.0).await, None);

    let e = NewJob::new("k")
        .traceparent("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("invalid traceparent") && e.contains("trace id is not lowercase hex"),
        "{e}"
    );

    // The flag: stored as given; a bad value refused, naming the flag, before anything is inserted.
    let out = run_jobq(Some(&db.url), &["enqueue", "k", "--traceparent", PARENT]);
    assert!(out.status.success(), "{}", stderr(&out));
    let cli_id: u64 = stdout(&out).parse().unwrap();
    assert_eq!(stored(&db, cli_id).await.as_deref(), Some(PARENT));
    let zero = "00-00000000000000000000000000000000-b7ad6b7169203331-01";
    let out = run_jobq(Some(&db.url), &["enqueue", "k", "--traceparent", zero]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--traceparent") && err.contains("trace id is all zeros"),
        "{err}"
    );

    // The environment, as OpenTelemetry tooling passes it: taken when valid, ignored (with a
    // warning) when not, and the flag wins over it.
    let env_run = |value: &str, args: &[&str]| {
        let mut cmd = jobq(Some(&db.url), &[&["enqueue", "k"], args].concat());
        cmd.env("TRACEPARENT", value)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        wait_output(cmd.spawn().unwrap(), std::time::Duration::from_secs(60))
    };
    let other = "00-11111111111111111111111111111111-2222222222222222-00";
    let out = env_run(other, &[]);
    assert_eq!(
        stored(&db, stdout(&out).parse().unwrap()).await.as_deref(),
        Some(other)
    );
    let out = env_run(other, &["--traceparent", PARENT]);
    assert_eq!(
        stored(&db, stdout(&out).parse().unwrap()).await.as_deref(),
        Some(PARENT)
    );
    let out = env_run("garbage", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ignoring TRACEPARENT"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stored(&db, stdout(&out).parse().unwrap()).await, None);

    // Shown by jobs show, its --json and the API's record.
    let show = run_jobq(Some(&db.url), &["jobs", "show", &cli_id.to_string()]);
    assert!(
        stdout(&show).contains(&format!("traceparent:  {PARENT}")),
        "{}",
        stdout(&show)
    );
    let json = run_jobq(
        Some(&db.url),
        &["jobs", "show", &cli_id.to_string(), "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(v["traceparent"], PARENT, "{v}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&run_jobq(
        Some(&db.url),
        &["jobs", "show", &plain.to_string(), "--json"],
    )))
    .unwrap();
    assert!(v["traceparent"].is_null(), "{v}");
}

#[tokio::test]
async fn plain_sql_sets_it_and_the_dashboard_shows_it() {
    let db = TestDb::new().await;
    db.exec(&format!(
        "INSERT INTO job_queue (kind, traceparent) VALUES ('k', '{PARENT}')"
    ))
    .await;
    let page = dashboard(&db, "/jobs/1").await;
    assert!(
        page.contains(&format!(
            "<dt>traceparent</dt><dd><code>{PARENT}</code></dd>"
        )),
        "{page}"
    );
    let api: serde_json::Value =
        serde_json::from_str(&dashboard(&db, "/api/jobs/1").await).unwrap();
    assert_eq!(api["traceparent"], PARENT, "{api}");
}

/// The body of the dashboard's answer to a GET of `uri`, as a browser on the machine would ask.
async fn dashboard(db: &TestDb, uri: &str) -> String {
    let app = jobq::web::router(db.pool.clone(), jobq::web::WebConfig::default()).unwrap();
    crate::common::dashboard_get(&app, uri).await.1
}

/// Every kind of handler gets the stored traceparent (no exporter here, so it is passed through as it
/// is): a command in `TRACEPARENT`, an SQL statement as `$traceparent`, a process in its message, a
/// Rust handler from [`JobContext::traceparent`]. A job without one gets none.
#[tokio::test]
async fn every_kind_of_handler_receives_it() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE seen (job_id BIGINT UNSIGNED, traceparent VARCHAR(55))")
        .await;
    let out = scratch_dir();
    let script = "printf '%s' \"${TRACEPARENT-unset}\" > \"$OUT/$JOBQ_JOB_ID\"";
    let mut config = format!(
        "[handlers.cmd]\ncommand = [\"sh\", \"-c\", {script:?}]\nenv = {{ OUT = {:?} }}\n\n\
         [handlers.sql]\nsql = \"INSERT INTO seen VALUES (?, ?)\"\nparams = [\"$job_id\", \"$traceparent\"]\n",
        out.to_str().unwrap()
    );
    let python = std::env::var("JOBQ_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/process/demo.py");
    let with_process = std::path::Path::new(&python).exists();
    if with_process {
        config += &format!("\n[handlers.traced]\nprocess = [{python:?}, {demo:?}]\n");
    } else {
        eprintln!("SKIPPED (process handler part): {python} is not installed");
    }
    let dir = scratch_dir();
    let handlers = Config::load(&write_config(&dir, &config))
        .unwrap()
        .handlers(&db.pool)
        .unwrap();
    let seen: Arc<Mutex<BTreeMap<u64, Option<String>>>> = Arc::default();
    let s = seen.clone();
    let handlers = handlers
        .register("rust", move |job: JobContext| {
            let s = s.clone();
            async move {
                let t = job.traceparent().map(|t| t.to_string());
                s.lock().unwrap().insert(job.id.0, t);
                Ok::<(), JobError>(())
            }
        })
        .unwrap();

    let mut kinds = vec!["cmd", "sql", "rust"];
    if with_process {
        kinds.push("traced");
    }
    let mut ids = Vec::new();
    let file = out.join("process.txt");
    for kind in &kinds {
        for with in [true, false] {
            let job = NewJob::new(*kind)
                .payload(&serde_json::json!({ "file": file }))
                .unwrap();
            let job = if with {
                job.traceparent(PARENT).unwrap()
            } else {
                job
            };
            ids.push((*kind, with, jobq::enqueue(&db.pool, &job).await.unwrap().0));
        }
    }
    let cfg = WorkerConfig {
        mode: Mode::Drain,
        ..Default::default()
    };
    let report = Worker::new(db.pool.clone(), handlers, cfg)
        .unwrap()
        .run(jobq::CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.done as usize, ids.len(), "{report:?}");

    for (kind, with, id) in ids {
        let want = with.then_some(PARENT);
        let got = match kind {
            "cmd" => Some(std::fs::read_to_string(out.join(id.to_string())).unwrap())
                .filter(|v| v != "unset"),
            "sql" => {
                db.scalar::<Option<String>>(&format!(
                    "SELECT traceparent FROM seen WHERE job_id = {id}"
                ))
                .await
            }
            "rust" => seen.lock().unwrap()[&id].clone(),
            _ => None,
        };
        if kind != "traced" {
            assert_eq!(got.as_deref(), want, "{kind} job {id}");
        }
    }
    if with_process {
        // One line per job, in claim order: the one with, then "None" for the one without.
        let lines = std::fs::read_to_string(&file).unwrap();
        let mut lines: Vec<&str> = lines.lines().collect();
        lines.sort();
        assert_eq!(lines, vec![PARENT, "None"]);
    }
    std::fs::remove_dir_all(&out).ok();
    std::fs::remove_dir_all(&dir).ok();
}

/// A malformed value written by plain SQL: the job runs, without a parent, and the worker says why,
/// once.
#[tokio::test]
async fn a_malformed_value_from_sql_runs_the_job_without_a_parent_and_is_logged() {
    let db = TestDb::new().await;
    // The column takes it (schema 25 says why it has no CHECK); the library would not.
    db.exec(
        "INSERT INTO job_queue (kind, traceparent) \
         VALUES ('cmd', '00-00000000000000000000000000000000-b7ad6b7169203331-01')",
    )
    .await;
    let out = scratch_dir();
    let script = "printf '%s' \"${TRACEPARENT-unset}\" > \"$OUT/seen\"";
    let config = write_config(
        &out,
        &format!(
            "[handlers.cmd]\ncommand = [\"sh\", \"-c\", {script:?}]\nenv = {{ OUT = {:?} }}\n",
            out.to_str().unwrap()
        ),
    );
    let run = run_jobq(
        Some(&db.url),
        &["worker", "--config", config.to_str().unwrap()],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(std::fs::read_to_string(out.join("seen")).unwrap(), "unset");
    let log = stderr(&run);
    assert_eq!(
        log.matches("not valid W3C trace context").count(),
        1,
        "logged once: {log}"
    );
    assert!(log.contains("trace id is all zeros"), "{log}");
    let j = jobq::testing::get_job(&db.pool, jobq::JobId(1))
        .await
        .unwrap();
    assert_eq!(j.state, State::Done);
    std::fs::remove_dir_all(&out).ok();
}

/// The column is read from the row the claim locks anyway: the claim's two SELECTs read exactly as
/// many index entries and rows with every job carrying a traceparent as with none.
#[tokio::test]
async fn the_claim_reads_no_more_for_it() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 50).await;
    db.exec("ANALYZE TABLE job_queue").await;
    let mut conn = db.pool.acquire().await.unwrap();
    let [pick, walk] = claim_selects("default", "h", &["k"], 10);
    // The first run of a statement on a connection reads more keys (the pause and pin checks' tables
    // opened); compare warm runs.
    reads(&mut conn, &pick).await;
    let before = (reads(&mut conn, &pick).await, reads(&mut conn, &walk).await);
    db.exec(&format!("UPDATE job_queue SET traceparent = '{PARENT}'"))
        .await;
    let after = (reads(&mut conn, &pick).await, reads(&mut conn, &walk).await);
    assert_eq!(before.0.0, 10);
    assert_eq!(before, after, "Handler_read_* of the claim's two SELECTs");
}

/// Runs `sql` in a transaction rolled back after: its row count and every Handler_read_* counter.
async fn reads(conn: &mut sqlx::MySqlConnection, sql: &str) -> (usize, Vec<(String, String)>) {
    use sqlx::{Connection, Row};
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("FLUSH STATUS").execute(&mut *tx).await.unwrap();
    let rows = sqlx::query(sql).fetch_all(&mut *tx).await.unwrap();
    let counts = sqlx::query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(&mut *tx)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let text = |i: usize| String::from_utf8(r.get::<Vec<u8>, _>(i)).unwrap();
            (text(0), text(1))
        })
        .collect();
    tx.rollback().await.unwrap();
    (rows.len(), counts)
}
