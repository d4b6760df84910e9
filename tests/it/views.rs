//! The DBA views of schema 10: jobq_jobs, jobq_jobs_running (joined with the processlist) and
//! jobq_schedules_next, read with plain SQL as an operator would.

use std::time::Duration;

use jobq::ScheduleDef;
use jobq::{Handlers, JobContext, JobError, Schedules};

use crate::common::{TestDb, wait_until};

/// (id, state, status, next_run_at set, attempts, max_attempts, failures, last_error)
type JobRow = (u64, String, String, bool, u16, u16, i64, Option<String>);

/// (name, state, status, next_run_at set, overdue_secs)
type ScheduleRow = (String, String, String, bool, Option<i64>);

/// The columns later schemas added to job_queue, after the old ones (schema 31): a unique, debounced,
/// ordered, aged job with progress and a trace, next to one with none of it.
#[tokio::test]
async fn jobq_jobs_shows_the_keys_progress_and_trace_of_a_job() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (id, kind, unique_key, debounce_key, debounced, order_key, order_lanes, \
         base_priority, priority, progress, progress_message, traceparent) VALUES \
         (1, 'k', 'u:1', 'd:1', 3, 'o:1', 2, 5, 1, 42.5, 'halfway', \
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'), \
         (2, 'k', NULL, NULL, 0, NULL, 1, NULL, 0, NULL, NULL, NULL)",
    )
    .await;
    type Extra = (
        u64,
        Option<String>,
        Option<String>,
        u32,
        Option<String>,
        u16,
        Option<i16>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<Extra> = sqlx::query_as(
        "SELECT id, CAST(unique_key AS CHAR), CAST(debounce_key AS CHAR), debounced, \
         CAST(order_key AS CHAR), order_lanes, base_priority, CAST(progress AS CHAR), progress_message, \
         CAST(traceparent AS CHAR) FROM jobq_jobs ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let s = |x: &str| Some(x.to_string());
    assert_eq!(
        rows,
        vec![
            (
                1,
                s("u:1"),
                s("d:1"),
                3,
                s("o:1"),
                2,
                Some(5),
                s("42.50"),
                s("halfway"),
                s("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            ),
            (2, None, None, 0, None, 1, None, None, None, None),
        ]
    );
}

#[tokio::test]
async fn jobq_jobs_shows_every_state_with_its_next_run_and_failures() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (id, kind, state, run_at, attempts, max_attempts, last_error) VALUES \
         (1, 'k', 'queued', NOW(6) - INTERVAL 1 SECOND, 0, 20, NULL), \
         (2, 'k', 'queued', NOW(6) + INTERVAL 1 HOUR, 0, 20, NULL), \
         (3, 'k', 'retry', NOW(6) + INTERVAL 1 HOUR, 2, 5, 'boom'), \
         (4, 'k', 'retry', NOW(6) - INTERVAL 1 SECOND, 1, 5, 'bang'), \
         (5, 'k', 'dead', NOW(6), 3, 3, 'gave up'), \
         (6, 'k', 'done', NOW(6), 2, 20, 'earlier'), \
         (7, 'k', 'cancelled', NOW(6), 0, 20, 'operator'), \
         (8, 'k', 'running', NOW(6), 1, 20, NULL)",
    )
    .await;
    db.exec("UPDATE job_queue SET cancel_requested_at = NOW(6), claim = 'ghost' WHERE id = 8")
        .await;
    let rows: Vec<JobRow> = sqlx::query_as(
        "SELECT id, state, status, next_run_at IS NOT NULL, attempts, max_attempts, failures, \
         CAST(last_error AS CHAR) FROM jobq_jobs ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let s = |x: &str| x.to_string();
    let e = |x: &str| Some(x.to_string());
    assert_eq!(
        rows,
        vec![
            (1, s("queued"), s("due"), true, 0, 20, 0, None),
            (2, s("queued"), s("waiting"), true, 0, 20, 0, None),
            (3, s("retry"), s("backoff"), true, 2, 5, 2, e("boom")),
            (4, s("retry"), s("due"), true, 1, 5, 1, e("bang")),
            (5, s("dead"), s("dead"), false, 3, 3, 3, e("gave up")),
            (6, s("done"), s("done"), false, 2, 20, 1, e("earlier")),
            (
                7,
                s("cancelled"),
                s("cancelled"),
                false,
                0,
                20,
                0,
                e("operator")
            ),
            (8, s("running"), s("cancelling"), false, 1, 20, 0, None),
        ]
    );
    // A waiting job's next run is its run_at.
    let same: i64 = db
        .scalar("SELECT COUNT(*) FROM jobq_jobs v JOIN job_queue j USING (id) WHERE v.next_run_at = j.run_at")
        .await;
    assert_eq!(same, 4);
    // A filter on the view reaches job_queue's primary key (the view is merged, not materialised).
    let explain = sqlx::query("EXPLAIN SELECT * FROM jobq_jobs WHERE id = 3")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(explain.len(), 1, "one table read, no derived table");
    let key: Option<Vec<u8>> = sqlx::Row::try_get(&explain[0], "key").unwrap();
    assert_eq!(key.as_deref(), Some(&b"PRIMARY"[..]));
}

#[tokio::test]
async fn jobq_jobs_running_names_the_claimant_and_joins_the_processlist() {
    let db = TestDb::new().await;
    db.insert_jobs("hold", 1).await;
    db.insert_jobs("later", 1).await;
    db.exec("UPDATE job_queue SET run_at = NOW(6) + INTERVAL 1 HOUR WHERE kind = 'later'")
        .await;
    let handlers = Handlers::new()
        .register("hold", |job: JobContext| async move {
            job.cancelled().await;
            Err::<(), _>(JobError::fatal("stopped"))
        })
        .unwrap();
    let worker = db.worker(handlers).start().await;
    wait_until("running", Duration::from_secs(30), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_jobs_running")
            .await
            == 1
    })
    .await;
    // running_secs counts whole seconds: wait for the first to pass.
    wait_until("a second of running", Duration::from_secs(30), || async {
        db.scalar::<i64>("SELECT running_secs FROM jobq_jobs_running WHERE id = 1")
            .await
            >= 1
    })
    .await;

    let me = jobq::testing::ProcessIdentity::current();
    let (id, kind, host, pid, conn, registered, secs): (u64, Vec<u8>, Vec<u8>, u64, u64, i64, i64) =
        sqlx::query_as(
            "SELECT id, kind, host, pid, connection_id, registered, running_secs FROM jobq_jobs_running",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!((id, kind.as_slice()), (1, &b"hold"[..]));
    assert_eq!(String::from_utf8(host).unwrap(), me.host);
    assert_eq!(pid, u64::from(me.pid));
    assert_eq!(registered, 1);
    assert!(secs >= 1, "ran {secs} s");
    // The connection id is the worker's registered anchor session...
    let registry: u64 = db
        .scalar("SELECT connection_id FROM jobq_processes WHERE role = 'worker'")
        .await;
    assert_eq!(conn, registry);
    // ... which the processlist shows, connected to this test's database.
    let (pl_id, pl_db): (u64, Option<String>) = sqlx::query_as(
        "SELECT CAST(pl.ID AS UNSIGNED), pl.DB FROM jobq_jobs_running r \
         JOIN information_schema.PROCESSLIST pl ON pl.ID = r.connection_id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(pl_id, registry);
    assert_eq!(pl_db.as_deref(), Some(db.name.as_str()));

    // A claimant that is not registered (it died) is still named, from its token. The view lists the
    // rows the claimants' holdings lists name (schema 41): the row goes on its token's list, as the
    // claim that stamped it would have put it.
    db.exec(
        "INSERT INTO job_queue (kind, state, attempts, claim, claimed_at, started_at) VALUES \
         ('orphan', 'running', 1, 'gone-host:4242:77:1-1700000000:00000000000000ff', NOW(6), NOW(6))",
    )
    .await;
    db.exec(
        "INSERT INTO jobq_holdings (holder, held_ids) SELECT claim, JSON_ARRAY(id) FROM job_queue \
         WHERE kind = 'orphan'",
    )
    .await;
    let orphan: (Vec<u8>, u64, u64, i64) = sqlx::query_as(
        "SELECT host, pid, connection_id, registered FROM jobq_jobs_running WHERE kind = 'orphan'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(orphan, (b"gone-host".to_vec(), 4242, 77, 0));
    // Jobs that are not running are not listed.
    let listed: i64 = db
        .scalar("SELECT COUNT(*) FROM jobq_jobs_running WHERE kind = 'later'")
        .await;
    assert_eq!(listed, 0);

    jobq::Jobs::new(db.pool.clone()).cancel(1).await.unwrap();
    wait_until("cancelled", Duration::from_secs(30), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_jobs_running WHERE id = 1")
            .await
            == 0
    })
    .await;
    worker.stop().await;
}

#[tokio::test]
async fn jobq_schedules_next_shows_state_next_run_and_due() {
    let db = TestDb::new().await;
    let schedules = Schedules::new(db.pool.clone());
    for (name, paused) in [("hourly", false), ("held", true), ("late", false)] {
        let mut def = ScheduleDef::new(name, "report", "every 1h");
        def.paused = paused;
        schedules.create(&def).await.unwrap();
    }
    db.exec(
        "UPDATE jobq_schedules SET next_run_at = NOW(6) - INTERVAL 90 SECOND WHERE name = 'late'",
    )
    .await;
    let rows: Vec<ScheduleRow> = sqlx::query_as(
        "SELECT CAST(name AS CHAR), state, status, next_run_at IS NOT NULL, overdue_secs \
         FROM jobq_schedules_next ORDER BY name",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows[0].0, "held");
    assert_eq!(
        (rows[0].1.as_str(), rows[0].2.as_str()),
        ("paused", "paused")
    );
    assert_eq!(rows[1].0, "hourly");
    assert_eq!(
        (rows[1].1.as_str(), rows[1].2.as_str()),
        ("enabled", "enabled")
    );
    assert!(rows[1].3 && rows[1].4.is_none());
    assert_eq!(rows[2].0, "late");
    assert_eq!((rows[2].1.as_str(), rows[2].2.as_str()), ("enabled", "due"));
    let late = rows[2].4.expect("overdue seconds");
    assert!((90..120).contains(&late), "{late}");
}
