//! Cancelling a running job through the database.

use std::time::Duration;

use jobq::admin::CancelOutcome;
use jobq::testing::claim_batch;
use jobq::{Handlers, JobContext, JobError};
use jobq::{Reaper, ReaperConfig};

use crate::common::{
    TestDb, jobq, scratch_dir, spawn_forever_worker, wait_output, wait_until, write_config,
};

#[tokio::test]
async fn a_running_library_job_is_told_and_ends_cancelled_never_retried() {
    let db = TestDb::new().await;
    db.insert_jobs("wait", 1).await;
    let handlers = Handlers::new()
        .register("wait", |job: JobContext| async move {
            job.cancelled().await;
            Err::<(), _>(JobError::retry("stopped on request"))
        })
        .unwrap();
    let worker = db.worker(handlers).start().await;
    wait_until("running", Duration::from_secs(5), || async {
        db.states().await == "running=1"
    })
    .await;
    assert_eq!(
        jobq::Jobs::new(db.pool.clone()).cancel(1).await.unwrap(),
        CancelOutcome::Requested
    );
    wait_until("cancelled", Duration::from_secs(5), || async {
        db.states().await == "cancelled=1"
    })
    .await;
    let r = worker.stop().await;
    assert_eq!((r.cancelled, r.retried), (1, 0));
    let job = jobq::testing::get_job(&db.pool, 1).await.unwrap();
    assert_eq!(job.attempts, 1);
    assert!(job.finished_at.is_some());
}

#[tokio::test]
async fn a_running_command_gets_sigterm_and_the_cli_reports_the_request() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        &format!(
            "[handlers.loop]\ncommand = [\"sh\", \"-c\", \
             \"trap 'echo term > {d}/term; exit 1' TERM; while true; do sleep 0.1; done\"]\n",
            d = dir.display()
        ),
    );
    db.insert_jobs("loop", 1).await;
    let worker = spawn_forever_worker(&db, &cfg);
    wait_until("running", Duration::from_secs(10), || async {
        db.states().await == "running=1"
    })
    .await;
    let out = jobq(Some(&db.url), &["jobs", "cancel", "1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("asked to stop"));
    wait_until("cancelled", Duration::from_secs(10), || async {
        db.states().await == "cancelled=1"
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(dir.join("term")).unwrap().trim(),
        "term"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        wait_output(worker.take(), Duration::from_secs(10))
            .status
            .success()
    );
    // Cancelling again: it has finished.
    let out = jobq(Some(&db.url), &["jobs", "cancel", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[tokio::test]
async fn a_cancel_requested_for_a_job_whose_worker_died_ends_it_cancelled() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 1).await;
    claim_batch(
        &db.pool,
        "ghost:4100000:1:1-1:00000000000000ff",
        "default",
        &["k".into()],
        1,
    )
    .await
    .unwrap();
    assert_eq!(
        jobq::Jobs::new(db.pool.clone()).cancel(1).await.unwrap(),
        CancelOutcome::Requested
    );
    db.age_ghost_claims().await;
    let reaper = Reaper::new(
        db.pool.clone(),
        ReaperConfig {
            retention: None,
            ..ReaperConfig::default()
        },
    )
    .unwrap();
    reaper.run_once().await.unwrap();
    assert_eq!(db.states().await, "cancelled=1");
}
