//! The dashboard in a real browser: headless Chromium opens every page of a running `jobq web`,
//! filters the jobs, retries a dead job, cancels a queued one through its confirmation page and pauses
//! a schedule, and saves a screenshot of each page under `target/screenshots/`.

use std::process::Child;
use std::time::Duration;

use crate::browser::{Browser, screenshot_dir};
use crate::common::{TestDb, scratch_dir, spawn_listening, wait_output};

/// Starts `jobq web --bind 127.0.0.1:0` and returns it with the base URL it logged.
async fn start_web(url: &str) -> (Child, String) {
    let (child, base) =
        spawn_listening(url, &["web", "--bind", "127.0.0.1:0"], "dashboard on ").await;
    (child, base.trim_end_matches('/').to_string())
}

async fn state(db: &TestDb, id: u64) -> String {
    db.scalar(&format!(
        "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = {id}"
    ))
    .await
}

#[tokio::test]
async fn in_chromium_every_page_opens_a_filter_finds_dead_jobs_retry_and_pause_work() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, payload) SELECT 'resize', JSON_OBJECT('id', seq) \
         FROM seq_1_to_40",
    )
    .await;
    db.exec(
        "UPDATE job_queue SET state = 'dead', attempts = 20, finished_at = NOW(6), \
         last_error = 'convert: no such file' WHERE id IN (3, 7)",
    )
    .await;
    db.exec(
        "UPDATE job_queue SET state = 'done', attempts = 1, \
         finished_at = NOW(6) - INTERVAL (id % 50) MINUTE WHERE id > 10",
    )
    .await;
    jobq::Schedules::new(db.pool.clone())
        .create(&jobq::ScheduleDef::new(
            "nightly-report",
            "report",
            "0 3 * * *",
        ))
        .await
        .unwrap();
    let (web, base) = start_web(&db.url).await;
    let shots = screenshot_dir();
    let dir = scratch_dir();
    let mut b = Browser::launch(&dir);

    b.goto(&format!("{base}/"));
    assert_eq!(b.eval("document.title"), "Overview · jobq");
    assert_eq!(b.eval("document.querySelector('#due').textContent"), "8");
    b.wait_for(
        "the chart",
        "document.querySelectorAll('svg.chart rect').length === 120",
    );
    assert_eq!(
        b.eval("document.querySelector('#queues tr[data-queue=default] td[data-state=dead]').textContent"),
        "2"
    );
    b.screenshot(&shots.join("overview.png"));

    // Filter the jobs list by state through its form.
    b.goto(&format!("{base}/jobs"));
    b.screenshot(&shots.join("jobs.png"));
    b.navigate_by(
        "document.querySelector('#filters select[name=state]').value = 'dead'; \
         document.querySelector('#filters').requestSubmit()",
    );
    assert_eq!(
        b.eval("new URLSearchParams(location.search).get('state')"),
        "dead"
    );
    assert_eq!(
        b.eval(
            "[...document.querySelectorAll('#jobs input[type=checkbox]')].map(c => c.value).join()"
        ),
        "7,3"
    );
    b.screenshot(&shots.join("jobs-dead.png"));

    // Open a dead job and retry it.
    b.navigate_by("document.querySelector('#jobs a[href$=\"/jobs/7\"]').click()");
    assert!(
        b.eval("document.querySelector('#last-error').textContent")
            .as_str()
            .unwrap()
            .contains("no such file")
    );
    b.screenshot(&shots.join("job.png"));
    b.navigate_by("document.querySelector('button[data-action=retry]').click()");
    b.wait_for("the notice", "document.querySelector('.notice')");
    assert_eq!(
        b.eval("document.querySelector('.notice').textContent"),
        "job 7 will run again"
    );
    assert_eq!(state(&db, 7).await, "queued");
    assert_eq!(state(&db, 3).await, "dead");

    // Cancel a queued job: the button leads to a confirmation page, which does it.
    b.goto(&format!("{base}/jobs/5"));
    b.navigate_by("document.querySelector('button[data-action=cancel]').click()");
    assert_eq!(b.eval("document.title"), "Cancel job 5? · jobq");
    assert_eq!(state(&db, 5).await, "queued");
    b.screenshot(&shots.join("confirm.png"));
    b.navigate_by("document.querySelector('#confirm button[type=submit]').click()");
    b.wait_for("the notice", "document.querySelector('.notice')");
    assert_eq!(state(&db, 5).await, "cancelled");

    // Pause the schedule from the schedules page.
    b.goto(&format!("{base}/schedules"));
    b.screenshot(&shots.join("schedules.png"));
    b.navigate_by(
        "document.querySelector('tr[data-schedule=\"nightly-report\"] button[data-action=pause]').click()",
    );
    b.wait_for("the notice", "document.querySelector('.notice')");
    assert_eq!(
        db.scalar::<String>(
            "SELECT CAST(state AS CHAR) FROM jobq_schedules WHERE name = 'nightly-report'"
        )
        .await,
        "paused"
    );
    assert!(
        b.eval("document.body.innerText")
            .as_str()
            .unwrap()
            .contains("Resume")
    );
    b.screenshot(&shots.join("schedule.png"));

    // The schedule's own page, opened by its address: its fields, next runs and (no) runs.
    b.goto(&format!("{base}/schedules/nightly-report"));
    assert_eq!(b.eval("document.title"), "Schedule nightly-report · jobq");
    assert_eq!(b.eval("document.querySelectorAll('#next li').length"), 5);
    b.screenshot(&shots.join("schedule-detail.png"));

    b.goto(&format!("{base}/processes"));
    b.screenshot(&shots.join("processes.png"));
    b.goto(&format!("{base}/audit"));
    assert_eq!(
        b.eval("[...document.querySelectorAll('#audit tbody tr td:nth-child(3)')].map(t => t.textContent).join()"),
        "schedule.pause,job.cancel,job.retry"
    );
    b.screenshot(&shots.join("audit.png"));
    for page in [
        "overview",
        "jobs",
        "jobs-dead",
        "job",
        "schedules",
        "schedule",
        "schedule-detail",
        "confirm",
        "processes",
        "audit",
    ] {
        let size = std::fs::metadata(shots.join(format!("{page}.png")))
            .unwrap()
            .len();
        assert!(size > 10_000, "{page}.png is {size} bytes: a blank page?");
    }
    drop(b);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(web.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = wait_output(web, Duration::from_secs(10));
    assert!(out.status.success(), "jobq web exits 0 on SIGTERM");
}
