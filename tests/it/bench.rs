//! `jobq bench` at CI size: not a timed test. It proves the benchmark runs end to end against the test
//! server and that its correctness checks hold (every job in every section claimed and finished exactly
//! once), and that it drops its scratch database.

use std::time::Duration;

use crate::common::base_url;
use jobq::bench::{self, BenchConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_bench_runs_and_every_job_finishes_exactly_once() {
    let mut cfg = BenchConfig::quick(base_url());
    cfg.jobq_exe = Some(crate::common::jobq_bin());
    // Smaller still than --quick: a few seconds of the suite's time.
    cfg.jobs = 500;
    cfg.raw_jobs = 300;
    cfg.sweep_jobs = 300;
    cfg.handler_jobs = 50;
    cfg.big_rows = 2_000;
    cfg.big_jobs = 300;
    cfg.footprint_jobs = 300;
    cfg.enqueue_single = 50;
    cfg.enqueue_multi = 1_000;
    cfg.idle_window = Duration::from_secs(1);
    cfg.steady_window = Duration::from_millis(300);
    cfg.steady_max_doublings = 0;

    let report = tokio::time::timeout(Duration::from_secs(120), bench::run(cfg))
        .await
        .expect("the quick bench finishes")
        .expect("the quick bench runs");

    let failed: Vec<_> = report.checks.iter().filter(|c| !c.ok).collect();
    assert!(failed.is_empty(), "correctness checks failed: {failed:#?}");
    assert!(report.all_checks_pass());
    // Every section ran and checked something.
    for s in bench::Section::ALL {
        assert!(
            report.checks.iter().any(|c| c.section == s),
            "section {} recorded no check",
            s.name()
        );
    }
    let raw = report.raw.as_ref().expect("raw section");
    assert_eq!(raw.cells.len(), 2 * 2 * 3, "W x B x finish variants");
    assert!(raw.cells.iter().all(|c| c.ok && c.jobs_per_sec > 0.0));
    assert!(report.drain.as_ref().is_some_and(|d| d.winner.ok));
    assert!(
        report
            .footprint
            .as_ref()
            .is_some_and(|f| f.peak_rss_mb > 0.0)
    );
    assert!(!report.targets.is_empty());
    // The text and the JSON render.
    let text = bench::render_text(&report);
    assert!(
        text.contains("TARGETS") && text.contains("CORRECTNESS"),
        "{text}"
    );
    serde_json::to_string(&report).expect("report serializes");

    // The scratch database is gone.
    let admin = jobq::db::connect(&jobq::db::ConnectConfig::new(base_url()))
        .await
        .unwrap();
    let left: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    )
    .bind(&report.database)
    .fetch_optional(&admin)
    .await
    .unwrap();
    assert!(
        left.is_none(),
        "scratch database {} was not dropped",
        report.database
    );
    admin.close().await;
}
