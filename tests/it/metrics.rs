//! `--metrics-addr`: the binary serves what the library records in Prometheus's text format, and health
//! and readiness beside it.

use std::process::Child;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{TestDb, scratch_dir, spawn_listening, wait_until, write_config};

/// `GET path` on `addr`: the status code and the body.
async fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let status = text[9..12].parse().expect("a status line");
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// Starts `jobq ARGS --metrics-addr 127.0.0.1:0` and returns it with the address it logged.
async fn start(url: &str, args: &[&str]) -> (Child, String) {
    let mut all = args.to_vec();
    all.extend(["--metrics-addr", "127.0.0.1:0"]);
    let (child, found) = spawn_listening(url, &all, "metrics on http://").await;
    let addr = found.split('/').next().unwrap().to_string();
    (child, addr)
}

fn stop(mut child: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}

#[tokio::test]
async fn a_worker_serves_its_counters_and_health() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 3).await;
    db.exec("INSERT INTO job_queue (kind, timeout_secs, max_attempts) VALUES ('slow', 1, 1)")
        .await;
    let dir = scratch_dir();
    let config = write_config(
        &dir,
        "[handlers.k]\ncommand = [\"true\"]\n[handlers.slow]\ncommand = [\"sleep\", \"30\"]\n",
    );
    let (child, addr) = start(
        &db.url,
        &["worker", "--forever", "--config", config.to_str().unwrap()],
    )
    .await;
    wait_until(
        "the three jobs are done and the slow one dead",
        Duration::from_secs(30),
        || async { db.states().await == "dead=1 done=3" },
    )
    .await;
    let wanted = [
        r#"jobq_jobs_finished_total{queue="default",kind="k",outcome="done"} 3"#,
        r#"jobq_jobs_claimed_total{queue="default",kind="k"} 3"#,
        "jobq_jobs_running 0",
        r#"jobq_job_duration_seconds_count{queue="default",kind="k"} 3"#,
        "# HELP jobq_jobs_finished_total",
        // Its one attempt timed out: the job is dead, the attempt is counted as a timeout.
        r#"jobq_jobs_finished_total{queue="default",kind="slow",outcome="timeout"} 1"#,
        r#"jobq_job_pickup_delay_seconds_count{queue="default"} 4"#,
        "jobq_finish_duration_seconds_count",
        r#"jobq_finish_rows_bucket{le="1"}"#,
        r#"jobq_claim_rows_bucket{le="0"}"#,
    ];
    // The counters move just after the finish commits: the rows can read done a moment before.
    let mut body = String::new();
    for _ in 0..50 {
        let (status, text) = get(&addr, "/metrics").await;
        assert_eq!(status, 200);
        body = text;
        if wanted.iter().all(|w| body.contains(w)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for want in wanted {
        assert!(body.contains(want), "{want:?} not in:\n{body}");
    }
    assert_eq!(get(&addr, "/healthz").await.0, 200);
    assert_eq!(get(&addr, "/readyz").await, (200, "ready\n".to_string()));
    stop(child);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_reaper_reports_the_queue_and_readiness_follows_the_schema() {
    let db = TestDb::new().await;
    db.insert_jobs("nobody-serves-this", 4).await;
    let (child, addr) = start(&db.url, &["reaper", "--interval", "100ms"]).await;
    let mut body = String::new();
    for _ in 0..100 {
        body = get(&addr, "/metrics").await.1;
        if body.contains(r#"jobq_queue_due_jobs{queue="default"} 4"#) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..100 {
        if body.contains("jobq_database_up 1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        body = get(&addr, "/metrics").await.1;
    }
    assert!(
        body.contains("jobq_database_up 1")
            && !body.contains("jobq_job_timeouts_total")
            && body.contains(r#"jobq_queue_due_jobs{queue="default"} 4"#)
            && body.contains(r#"jobq_processes{role="reaper"} 1"#)
            && body.contains(r#"jobq_jobs{state="queued"} 4"#)
            && body.contains(r#"jobq_jobs{state="done"} 0"#)
            && body.contains(r#"jobq_queue_jobs{queue="default",state="queued"} 4"#)
            && body.contains(r#"jobq_queue_waiting_jobs{queue="default"} 4"#)
            && body.contains(r#"jobq_queue_running_jobs{queue="default"} 0"#)
            && body.contains("jobq_oldest_running_age_seconds 0")
            && body.contains(r#"jobq_queue_oldest_due_age_seconds{queue="default"}"#),
        "{body}"
    );

    // The schema falls behind this build (a downgrade, a restore): still alive, not ready, and the
    // reason says so. (A process started on an unmigrated database exits at once, naming the cause.)
    db.exec(
        "DELETE FROM jobq_schema_migrations \
         WHERE version = (SELECT v FROM (SELECT MAX(version) AS v FROM jobq_schema_migrations) m)",
    )
    .await;
    assert_eq!(get(&addr, "/healthz").await.0, 200);
    let (status, body) = get(&addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not migrated"), "{body}");
    stop(child);
}

/// Waiting jobs are in `jobq_jobs`, and the ones that have waited longer than `[reaper] long_wait`
/// in `jobq_waiting_long_jobs`.
#[tokio::test]
async fn a_reaper_counts_waiting_jobs_and_long_waits() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (id, kind) VALUES (1, 'parent')")
        .await;
    db.exec(
        "INSERT INTO job_queue (id, kind, state, created_at) VALUES \
         (2, 'child', 'waiting', NOW(6) - INTERVAL 2 HOUR), \
         (3, 'child', 'waiting', NOW(6) - INTERVAL 45 MINUTE), (4, 'child', 'waiting', NOW(6))",
    )
    .await;
    db.exec("INSERT INTO jobq_job_deps (job_id, after_id) VALUES (2, 1), (3, 1), (4, 1)")
        .await;
    let dir = scratch_dir();
    let config = write_config(&dir, "[reaper]\nlong_wait = \"30m\"\n");
    let config = config.to_str().unwrap();
    let (child, addr) = start(
        &db.url,
        &["reaper", "--interval", "100ms", "--config", config],
    )
    .await;
    let mut body = String::new();
    for _ in 0..200 {
        body = get(&addr, "/metrics").await.1;
        if body.contains("jobq_waiting_long_jobs") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(child);
    assert!(
        body.contains(r#"jobq_jobs{state="waiting"} 3"#)
            && body.contains("jobq_waiting_long_jobs 2"),
        "{body}"
    );
}

/// `supervise --metrics-addr`: one endpoint with the supervisor's figures and each worker's, labelled
/// by slot, every family declared once.
#[tokio::test]
async fn a_supervisor_serves_its_workers_figures_on_one_endpoint() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 6).await;
    let dir = scratch_dir();
    let config = write_config(&dir, "[handlers.k]\ncommand = [\"true\"]\n");
    let (child, addr) = start(
        &db.url,
        &["supervise", "-n", "2", "--config", config.to_str().unwrap()],
    )
    .await;
    wait_until("the six jobs are done", Duration::from_secs(30), || async {
        db.states().await == "done=6"
    })
    .await;
    let claimed = |body: &str| -> u64 {
        body.lines()
            .filter(|l| l.starts_with("jobq_jobs_claimed_total{slot="))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let mut body = String::new();
    for _ in 0..50 {
        body = get(&addr, "/metrics").await.1;
        if claimed(&body) == 6
            && body.contains("jobq_claims_total{slot=\"0\",")
            && body.contains("jobq_claims_total{slot=\"1\",")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(claimed(&body), 6, "{body}");
    // Both workers claimed (one may have found the queue empty): both are in the one scrape.
    assert!(body.contains("jobq_claims_total{slot=\"0\","), "{body}");
    assert!(body.contains("jobq_claims_total{slot=\"1\","), "{body}");
    assert_eq!(
        body.matches("# TYPE jobq_jobs_claimed_total counter")
            .count(),
        1,
        "{body}"
    );
    stop(child);
    std::fs::remove_dir_all(&dir).ok();
}

/// `scheduler --forever --metrics-addr`: its figures, and ready once it is registered.
#[tokio::test]
async fn a_scheduler_serves_its_figures_and_is_ready_once_registered() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let config = write_config(
        &dir,
        "[schedules.yearly]\nkind = \"k\"\nspec = \"0 0 1 1 *\"\nat_startup = true\n",
    );
    let (child, addr) = start(
        &db.url,
        &[
            "scheduler",
            "--forever",
            "--interval",
            "100ms",
            "--config",
            config.to_str().unwrap(),
        ],
    )
    .await;
    let mut body = String::new();
    for _ in 0..100 {
        body = get(&addr, "/metrics").await.1;
        if body.contains("jobq_database_up 1") && body.contains("jobq_schedule_jobs_total") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(body.contains("jobq_database_up 1"), "{body}");
    assert!(
        body.contains(r#"jobq_schedule_jobs_total{cause="startup"} 1"#),
        "{body}"
    );
    assert_eq!(get(&addr, "/readyz").await, (200, "ready\n".to_string()));
    stop(child);
    std::fs::remove_dir_all(&dir).ok();
}

/// `web --metrics-addr`: the dashboard registers nothing, so it is ready on its database and schema
/// alone, and serves the metrics endpoint beside the pages.
#[tokio::test]
async fn the_dashboard_is_ready_without_registering() {
    let db = TestDb::new().await;
    let (child, addr) = start(&db.url, &["web", "--bind", "127.0.0.1:0"]).await;
    let (status, _) = get(&addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(get(&addr, "/healthz").await.0, 200);
    assert_eq!(get(&addr, "/readyz").await, (200, "ready\n".to_string()));
    db.exec(
        "DELETE FROM jobq_schema_migrations \
         WHERE version = (SELECT v FROM (SELECT MAX(version) AS v FROM jobq_schema_migrations) m)",
    )
    .await;
    let (status, body) = get(&addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    stop(child);
}

/// `jobq_queue_paused` tells a queue paused on purpose from one whose jobs are stuck (the example
/// alert JobqJobsWaiting leaves paused queues out with it): 1 while paused, 0 once resumed, and
/// nothing for a queue never paused.
#[tokio::test]
async fn a_reaper_reports_which_queues_are_paused() {
    let db = TestDb::new().await;
    db.insert_jobs("nobody-serves-this", 2).await;
    db.exec("INSERT INTO job_queue (kind, queue) VALUES ('k', 'held')")
        .await;
    db.exec(
        "INSERT INTO jobq_queues (name, paused_by, reason) VALUES ('held', 'ops', 'on purpose')",
    )
    .await;
    db.exec(
        "INSERT INTO jobq_limits (scope, name, max_jobs, set_by) \
         VALUES ('kind', 'nobody-serves-this', 0, 'ops')",
    )
    .await;
    let (child, addr) = start(&db.url, &["reaper", "--interval", "100ms"]).await;
    wait_until(
        "the reaper reports the paused queue",
        Duration::from_secs(20),
        || async {
            get(&addr, "/metrics")
                .await
                .1
                .contains(r#"jobq_queue_paused{queue="held"} 1"#)
        },
    )
    .await;
    let body = get(&addr, "/metrics").await.1;
    assert!(
        body.contains(r#"jobq_queue_due_jobs{queue="held"} 1"#)
            && body.contains(r#"jobq_queue_due_jobs{queue="default"} 2"#)
            && !body.contains(r#"jobq_queue_paused{queue="default"}"#),
        "{body}"
    );
    assert!(body.contains("# HELP jobq_queue_paused"), "{body}");
    // What holds the due jobs, per queue and reason.
    assert!(
        body.contains(r#"jobq_queue_held_jobs{queue="held",reason="paused"} 1"#)
            && body.contains(r#"jobq_queue_held_jobs{queue="default",reason="limit"} 2"#),
        "{body}"
    );
    db.exec("DELETE FROM jobq_queues WHERE name = 'held'").await;
    // The gauges are read every 15 s.
    wait_until(
        "the resumed queue's gauge drops to 0",
        Duration::from_secs(40),
        || async {
            get(&addr, "/metrics")
                .await
                .1
                .contains(r#"jobq_queue_paused{queue="held"} 0"#)
        },
    )
    .await;
    stop(child);
}
