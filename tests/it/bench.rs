//! `jobq bench --smoke`, through the real binary: not a timed test. It proves the benchmark runs end to
//! end against the test server and that its correctness checks hold (every job in every section claimed
//! and finished exactly once), that its JSON report has every section, and that it drops its scratch
//! database.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::common::{base_url, jobq};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_bench_runs_and_every_job_finishes_exactly_once() {
    let child = jobq(Some(&base_url()), &["bench", "--smoke", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn jobq bench");
    // Read both pipes to the end while it runs: a report larger than a pipe's buffer must not stall it.
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("the smoke bench finishes within 3 minutes")
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "jobq bench failed:\n{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the report is not JSON ({e}):\n{stderr}"));

    let checks = report["checks"].as_array().expect("checks");
    let failed: Vec<_> = checks.iter().filter(|c| c["ok"] != true).collect();
    assert!(failed.is_empty(), "correctness checks failed: {failed:#?}");
    for section in [
        "raw",
        "drain",
        "steady",
        "big",
        "idle",
        "footprint",
        "enqueue",
        "web",
        "backlog",
    ] {
        assert!(
            checks.iter().any(|c| c["section"] == section),
            "section {section} recorded no check"
        );
    }
    let cells = report["raw"]["cells"].as_array().expect("raw cells");
    assert_eq!(cells.len(), 2 * 2 * 4, "W x B x finish variants");
    assert!(
        cells
            .iter()
            .all(|c| c["ok"] == true && c["jobs_per_sec"].as_f64().unwrap() > 0.0)
    );
    let lean = report["raw"]["lean"].as_array().expect("lean cells");
    assert_eq!(lean.len(), 2, "one lean cell per W at the largest B");
    assert!(
        lean.iter()
            .all(|c| c["ok"] == true && c["jobs_per_sec"].as_f64().unwrap() > 0.0)
    );
    assert_eq!(report["drain"]["winner"]["ok"], true);
    let backlog = &report["backlog"];
    for table in ["deep", "small"] {
        assert!(
            backlog[table]["mean_ms"].as_f64().unwrap() > 0.0
                && backlog[table]["rows_per_claim"].as_f64().unwrap() > 0.0,
            "backlog {table}: {backlog:#}"
        );
    }
    assert_eq!(backlog["urgent"]["picked_up"], true, "{backlog:#}");
    // The head-to-head runs the lean schema and separate worker processes beside the limit.
    let h = &report["drain"]["head_to_head"];
    for key in ["lean", "procs"] {
        let runs = h[key]
            .as_array()
            .unwrap_or_else(|| panic!("head_to_head.{key}"));
        assert!(!runs.is_empty(), "head_to_head.{key} is empty");
        assert!(runs.iter().all(|r| r.as_f64().unwrap() > 0.0), "{h}");
    }
    assert!(report["footprint"]["peak_rss_mb"].as_f64().unwrap() > 0.0);
    assert!(!report["targets"].as_array().unwrap().is_empty());
    assert!(
        report["web"]["pages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["p50_ms"].as_f64().unwrap() > 0.0)
    );

    // The scratch database is gone.
    let database = report["database"].as_str().expect("database name");
    let admin = jobq::connect(&jobq::ConnectConfig::new(base_url()).unwrap())
        .await
        .unwrap();
    let left: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    )
    .bind(database)
    .fetch_optional(&admin)
    .await
    .unwrap();
    assert!(
        left.is_none(),
        "scratch database {database} was not dropped"
    );
    admin.close().await;
}
