//! What the binary prints for programs: `--json` on the reporting commands (the field names the README
//! documents) and `--log-format json` (one JSON object per log line).

use std::process::Output;

use serde_json::Value;

use crate::common::{TestDb, run_jobq, scratch_dir, write_config};

/// Runs `jobq ARGS` against `db`, expects success, and parses stdout as JSON.
fn json(db: &TestDb, args: &[&str]) -> Value {
    let out = run_jobq(Some(&db.url), args);
    assert!(
        out.status.success(),
        "{args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[tokio::test]
async fn reporting_commands_print_json_with_the_documented_fields() {
    let db = TestDb::new().await;
    let id = json(
        &db,
        &["enqueue", "resize", "-p", r#"{"image":7}"#, "--json"],
    )["id"]
        .as_u64()
        .expect("enqueue --json prints the id");

    let job = json(&db, &["jobs", "show", &id.to_string(), "--json"]);
    assert_eq!(job["id"], id);
    assert_eq!(job["kind"], "resize");
    assert_eq!(job["state"], "queued");
    assert_eq!(job["queue"], "default");
    assert_eq!(job["payload"]["image"], 7, "the payload is embedded JSON");
    assert_eq!(job["attempts"], 0);
    assert_eq!(job["attempt_history"], Value::Array(vec![]));
    assert!(job["run_at"].as_str().unwrap().ends_with('Z'), "{job}");

    let list = json(&db, &["jobs", "list", "--state", "queued", "--json"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], id);

    let stats = json(&db, &["stats", "--json"]);
    assert_eq!(stats["counts"][0]["queue"], "default");
    assert_eq!(stats["counts"][0]["state"], "queued");
    assert_eq!(stats["counts"][0]["count"], 1);
    assert_eq!(stats["lag"][0]["due"], 1);
    assert!(stats["lag"][0]["oldest_due_secs"].as_f64().unwrap() >= 0.0);
    assert_eq!(stats["due_by_kind"][0]["kind"], "resize");
    assert_eq!(stats["processes"], Value::Array(vec![]));
    assert_eq!(stats["unserved"][0]["reason"], "no_worker_on_queue");

    let create = run_jobq(
        Some(&db.url),
        &[
            "schedule",
            "create",
            "nightly",
            "-k",
            "report",
            "-s",
            "daily at 02:30",
        ],
    );
    assert!(create.status.success());
    let list = json(&db, &["schedule", "list", "--json"]);
    assert_eq!(list[0]["name"], "nightly");
    assert_eq!(list[0]["state"], "enabled");
    assert_eq!(list[0]["overlap"], "wait");
    assert!(
        list[0]["next_run_at"]
            .as_str()
            .unwrap()
            .ends_with("02:30:00Z")
    );
    run_jobq(Some(&db.url), &["schedule", "run-now", "nightly"]);
    let show = json(&db, &["schedule", "show", "nightly", "--json"]);
    assert_eq!(show["schedule"]["spec"], "daily at 02:30");
    assert_eq!(show["runs"][0]["cause"], "manual");
    assert_eq!(show["runs"][0]["job_state"], "queued");
    let runs = json(&db, &["schedule", "runs", "nightly", "--json"]);
    assert!(runs[0]["job_id"].as_u64().unwrap() > id);
    let next = json(&db, &["schedule", "next", "nightly", "-n", "2", "--json"]);
    assert_eq!(next.as_array().unwrap().len(), 2);
    let next = json(
        &db,
        &[
            "schedule", "next", "--spec", "every 5m", "-n", "3", "--json",
        ],
    );
    assert_eq!(next.as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_readable_reports() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 2).await;
    let dir = scratch_dir();
    let config = write_config(&dir, "[handlers.k]\ncommand = [\"true\"]\n");
    let config = config.to_str().unwrap();
    let out: Output = run_jobq(
        Some(&db.url),
        &["--log-format", "json", "worker", "--config", config],
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let started = lines
        .iter()
        .find(|l| l["message"] == "worker started")
        .expect("a start line");
    assert_eq!(started["level"], "INFO");
    assert_eq!(started["queues"], "default");
    assert_eq!(started["concurrency"], 10);
    assert!(started["claim"].as_str().is_some());
    let stopped = lines
        .iter()
        .find(|l| l["message"] == "worker stopped")
        .expect("a stop line");
    // The counters are fields, as numbers; the zero ones are left out.
    assert_eq!(stopped["claimed"], 2, "{stopped}");
    assert_eq!(stopped["done"], 2, "{stopped}");
    assert!(stopped.get("retried").is_none(), "{stopped}");

    // The same in text: key=value after the message, no Rust debug structs.
    db.insert_jobs("k", 1).await;
    let out = run_jobq(Some(&db.url), &["worker", "--config", config]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("worker stopped claimed=1 done=1") && !text.contains("WorkerReport"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
