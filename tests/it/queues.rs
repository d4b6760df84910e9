//! Queue pause and resume: through the table, so every worker on every host obeys at its next claim.

use std::time::{Duration, Instant};

use jobq::{Handlers, JobContext, JobError, Queues};

use crate::common::{TestDb, claim_selects, rows_and_read_next, run_jobq, wait_until};

/// A worker serving two queues: while one is paused it runs only the other's jobs, and after the resume
/// it takes the held jobs within its idle wait.
#[tokio::test]
async fn a_paused_queue_is_not_claimed_until_it_is_resumed() {
    let db = TestDb::new().await;
    let queues = Queues::new(db.pool(2).await);
    let p = queues
        .pause("held", "test", Some("maintenance"))
        .await
        .unwrap();
    assert!(p.newly && !p.had_waiting_jobs);
    assert!(!queues.pause("held", "again", None).await.unwrap().newly);
    db.exec(
        "INSERT INTO job_queue (queue, kind) VALUES ('held', 'k'), ('held', 'k'), ('open', 'k')",
    )
    .await;
    let handlers = Handlers::new()
        .register("k", |_job: JobContext| async { Ok::<(), JobError>(()) })
        .unwrap();
    let worker = db.worker(handlers).queues(&["held", "open"]).start().await;
    wait_until(
        "the open queue's job done",
        Duration::from_secs(10),
        || async { db.states().await.contains("done=1") },
    )
    .await;
    // It has looked for work again since, and found nothing it may claim.
    worker.settled().await;
    assert_eq!(
        db.states().await,
        "done=1 queued=2",
        "a paused queue's job ran"
    );
    let paused = queues.paused().await.unwrap();
    assert_eq!(paused.len(), 1);
    assert_eq!(
        (
            paused[0].name.as_str(),
            paused[0].paused_by.as_str(),
            paused[0].reason.as_deref()
        ),
        ("held", "test", Some("maintenance"))
    );
    let resumed = Instant::now();
    assert!(queues.resume("held").await.unwrap());
    assert!(!queues.resume("held").await.unwrap());
    wait_until("the held jobs done", Duration::from_secs(10), || async {
        db.states().await == "done=3"
    })
    .await;
    eprintln!("held jobs done {:?} after the resume", resumed.elapsed());
    assert!(
        resumed.elapsed() < Duration::from_secs(2),
        "{:?}",
        resumed.elapsed()
    );
    worker.stop().await;
}

/// A paused queue's claim reads nothing: the optimizer resolves the pause before it reads the index.
#[tokio::test]
async fn a_paused_queues_claim_reads_no_index_entry() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue, kind) SELECT 'big', 'k' FROM seq_1_to_5000")
        .await;
    db.exec("INSERT INTO jobq_queues (name) VALUES ('big')")
        .await;
    let pool = db.pool(1).await;
    let mut conn = pool.acquire().await.unwrap();
    for sql in claim_selects("big", "here", &["k"], 10) {
        let explain: Vec<sqlx::mysql::MySqlRow> = sqlx::query(&format!("EXPLAIN {sql}"))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        use sqlx::Row;
        let extra: Vec<String> = explain
            .iter()
            .map(|r| {
                r.try_get::<Option<String>, _>("Extra")
                    .unwrap()
                    .unwrap_or_default()
            })
            .collect();
        assert!(
            extra.iter().any(|e| e.contains("Impossible WHERE")),
            "plan of {sql}: {extra:?}"
        );
        let (rows, read_next) = rows_and_read_next(&mut conn, &sql).await;
        assert!(rows.is_empty());
        assert_eq!(read_next, "0", "{sql}");
    }
}

/// The CLI: pause with a reason, list (text and JSON), resume; bad names refused with nothing written.
#[tokio::test]
async fn the_queue_commands_pause_list_and_resume() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue, kind) VALUES ('mail', 'k')")
        .await;
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let out = run_jobq(
        Some(&db.url),
        &["queue", "pause", "mail", "--reason", "SMTP down"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("queue mail paused"), "{}", text(&out));
    let out = run_jobq(Some(&db.url), &["queue", "pause", "nosuch"]);
    assert!(text(&out).contains("no waiting jobs"), "{}", text(&out));
    let out = run_jobq(Some(&db.url), &["queue", "list"]);
    let listed = text(&out);
    assert!(
        listed.contains("mail") && listed.contains("SMTP down") && listed.contains("nosuch"),
        "{listed}"
    );
    let out = run_jobq(Some(&db.url), &["queue", "list", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["paused"][0]["name"], "mail");
    assert_eq!(json["paused"][0]["reason"], "SMTP down");
    let out = run_jobq(Some(&db.url), &["stats"]);
    assert!(
        text(&out).contains("queue mail is PAUSED") && text(&out).contains("SMTP down"),
        "{}",
        text(&out)
    );
    let out = run_jobq(Some(&db.url), &["stats", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["paused"][0]["name"], "mail");
    let out = run_jobq(Some(&db.url), &["queue", "resume", "mail"]);
    assert!(text(&out).contains("queue mail resumed"), "{}", text(&out));
    let out = run_jobq(Some(&db.url), &["queue", "pause", "bad name"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("invalid queue"), "{}", text(&out));
    let long = "x".repeat(300);
    let out = run_jobq(
        Some(&db.url),
        &["queue", "pause", "mail", "--reason", &long],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("pause reason"), "{}", text(&out));
    let left: i64 = db.scalar("SELECT COUNT(*) FROM jobq_queues").await;
    assert_eq!(left, 1, "only nosuch stays paused");
}

/// A queue pinned to other hosts is left alone by this host's worker (its other queues still run);
/// pinned here too, it runs. The CLI pins, lists and unpins, and refuses a bad host name.
#[tokio::test]
async fn a_queue_pinned_to_other_hosts_is_left_alone_here() {
    let db = TestDb::new().await;
    let here = jobq::testing::ProcessIdentity::current().host.clone();
    db.exec(
        "INSERT INTO job_queue (queue, kind) VALUES ('gpu', 'k'), ('gpu', 'k'), ('default', 'k')",
    )
    .await;
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let out = run_jobq(
        Some(&db.url),
        &["queue", "pin", "gpu", "--host", "gpu-box-1"],
    );
    assert!(
        text(&out).contains("served only on gpu-box-1"),
        "{}",
        text(&out)
    );
    let handlers = Handlers::new()
        .register("k", |_job: JobContext| async { Ok::<(), JobError>(()) })
        .unwrap();
    let worker = db
        .worker(handlers)
        .queues(&["gpu", "default"])
        .start()
        .await;
    wait_until(
        "the default queue's job done",
        Duration::from_secs(10),
        || async { db.states().await.contains("done=1") },
    )
    .await;
    // It has looked for work again since, and found nothing it may claim.
    worker.settled().await;
    assert_eq!(
        db.states().await,
        "done=1 queued=2",
        "a job pinned elsewhere ran here"
    );
    let out = run_jobq(Some(&db.url), &["queue", "pin", "gpu", "--host", &here]);
    assert!(out.status.success(), "{}", text(&out));
    wait_until(
        "the pinned jobs done here",
        Duration::from_secs(10),
        || async { db.states().await == "done=3" },
    )
    .await;
    worker.stop().await;
    let out = run_jobq(Some(&db.url), &["queue", "list"]);
    assert!(
        text(&out).contains("gpu") && text(&out).contains("pinned to gpu-box-1"),
        "{}",
        text(&out)
    );
    let out = run_jobq(
        Some(&db.url),
        &["queue", "unpin", "gpu", "--host", "gpu-box-1"],
    );
    assert!(
        text(&out).contains("no longer served on gpu-box-1"),
        "{}",
        text(&out)
    );
    let out = run_jobq(Some(&db.url), &["queue", "unpin", "gpu"]);
    assert!(
        text(&out).contains("served on every host again"),
        "{}",
        text(&out)
    );
    let out = run_jobq(
        Some(&db.url),
        &["queue", "pin", "gpu", "--host", "bad host"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("invalid host"), "{}", text(&out));
    let left: i64 = db.scalar("SELECT COUNT(*) FROM jobq_queue_hosts").await;
    assert_eq!(left, 0);
}
