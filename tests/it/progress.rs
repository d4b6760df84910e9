//! A running job's progress and the output it leaves: from the library, from SQL, and as `jobq jobs`,
//! the dashboard and the API show them.

use std::sync::Arc;
use std::time::Duration;

use jobq::{Handlers, JobContext, JobError, State};
use tokio::sync::Notify;

use crate::common::{TestDb, dashboard_get as get, run_jobq, wait_until};

/// The progress columns of job `id`: (percent, message, attempt).
async fn progress_row(db: &TestDb, id: jobq::JobId) -> Option<(f64, Option<String>, u16)> {
    let j = jobq::Jobs::new(db.pool.clone()).get(id).await.unwrap();
    j.progress.map(|p| (p.percent, p.message, p.attempt))
}

/// Reports are written at most once a second and the last one is never lost; the output stays on the
/// job after it is done; the CLI, the page and the API show both.
#[tokio::test]
async fn a_library_handler_reports_progress_and_leaves_output() {
    let db = TestDb::new().await;
    let go_on = Arc::new(Notify::new());
    let step = go_on.clone();
    let handlers = Handlers::new()
        .register("report", move |job: JobContext| {
            let step = step.clone();
            async move {
                job.progress(10.0, Some("started")).await?;
                // Within the second: held back, then written when it is up.
                job.progress(20.0, None).await?;
                job.progress(30.0, Some("a third")).await?;
                step.notified().await;
                job.progress(99.5, Some("almost")).await?;
                job.output(&serde_json::json!({"rows": 3, "note": "ünïcode <b>"}))
                    .await?;
                Ok::<(), JobError>(())
            }
        })
        .unwrap();
    let id = jobq::enqueue(&db.pool, &jobq::NewJob::new("report"))
        .await
        .unwrap();
    let worker = db.worker(handlers).start().await;

    wait_until("the first report", Duration::from_secs(20), || async {
        progress_row(&db, id).await.is_some()
    })
    .await;
    let first = progress_row(&db, id).await.unwrap();
    assert!(
        first == (10.0, Some("started".into()), 1) || first.0 == 30.0,
        "the first report is written at once: {first:?}"
    );
    wait_until(
        "the last report of the second, written when it is up",
        Duration::from_secs(10),
        || async { progress_row(&db, id).await.unwrap().0 == 30.0 },
    )
    .await;
    assert_eq!(
        progress_row(&db, id).await.unwrap(),
        (30.0, Some("a third".into()), 1),
        "20 was replaced before it was written"
    );
    // While it runs, its page reloads itself so that the progress moves; a finished job's does not.
    let app = jobq::web::router(db.pool.clone(), jobq::web::WebConfig::default()).unwrap();
    assert_eq!(
        get(&app, &format!("/jobs/{id}")).await.0.as_deref(),
        Some("5")
    );
    go_on.notify_one();
    wait_until("done", Duration::from_secs(20), || async {
        jobq::Jobs::new(db.pool.clone())
            .get(id)
            .await
            .unwrap()
            .state
            == State::Done
    })
    .await;
    worker.stop().await;
    assert_eq!(
        progress_row(&db, id).await.unwrap(),
        (99.5, Some("almost".into()), 1),
        "the report made just before the end is written before the finish"
    );
    let output = jobq::Jobs::new(db.pool.clone())
        .output(id)
        .await
        .unwrap()
        .expect("an output");
    let v: serde_json::Value = serde_json::from_str(&output).unwrap();
    assert_eq!(v, serde_json::json!({"rows": 3, "note": "ünïcode <b>"}));

    // The CLI.
    let ids = id.to_string();
    let out = run_jobq(Some(&db.url), &["jobs", "output", &ids]);
    assert!(out.status.success(), "{out:?}");
    let printed: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("jobs output prints the JSON");
    assert_eq!(printed, v);
    let show = String::from_utf8(run_jobq(Some(&db.url), &["jobs", "show", &ids]).stdout).unwrap();
    assert!(show.contains("progress:     99.5% almost, at "), "{show}");
    assert!(show.contains("\"rows\": 3"), "{show}");
    let json: serde_json::Value =
        serde_json::from_slice(&run_jobq(Some(&db.url), &["jobs", "show", &ids, "--json"]).stdout)
            .unwrap();
    assert_eq!(json["output"], v);
    assert_eq!(json["progress"]["percent"], 99.5);
    assert_eq!(json["progress"]["message"], "almost");
    assert_eq!(json["progress"]["attempt"], 1);

    // The dashboard's page and API.
    let (refresh, page) = get(&app, &format!("/jobs/{id}")).await;
    assert_eq!(refresh, None);
    assert!(
        page.contains("<progress max=\"100\" value=\"99.5\"></progress> 99.5%: almost"),
        "{page}"
    );
    assert!(page.contains("&lt;b&gt;"), "the output is escaped: {page}");
    let api: serde_json::Value =
        serde_json::from_str(&get(&app, &format!("/api/jobs/{id}")).await.1).unwrap();
    assert_eq!(api["output"], v);
    assert_eq!(api["progress"]["percent"], 99.5);

    // A job that left none says so.
    let none = jobq::enqueue(&db.pool, &jobq::NewJob::new("quiet"))
        .await
        .unwrap()
        .to_string();
    let out = run_jobq(Some(&db.url), &["jobs", "output", &none]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has left no output"),
        "{out:?}"
    );
}

/// Bad reports fail the attempt for good, naming what is wrong, and write nothing.
#[tokio::test]
async fn bad_reports_are_refused_saying_why() {
    let db = TestDb::new().await;
    let handlers = Handlers::new()
        .register("over", |job: JobContext| async move {
            job.progress(101.0, None).await
        })
        .unwrap()
        .register("big", |job: JobContext| async move {
            job.output(&"x".repeat(70_000)).await
        })
        .unwrap();
    let over = jobq::enqueue(&db.pool, &jobq::NewJob::new("over"))
        .await
        .unwrap();
    let big = jobq::enqueue(&db.pool, &jobq::NewJob::new("big"))
        .await
        .unwrap();
    db.worker(handlers).drain().await;
    let jobs = jobq::Jobs::new(db.pool.clone());
    let o = jobs.get(over).await.unwrap();
    assert_eq!(o.state, State::Dead);
    assert!(
        o.last_error
            .unwrap()
            .contains("101 is not a percent from 0 to 100")
    );
    assert!(o.progress.is_none());
    let b = jobs.get(big).await.unwrap();
    assert_eq!(b.state, State::Dead);
    assert!(
        b.last_error
            .unwrap()
            .contains("at most 65536 bytes (64 KiB)")
    );
    assert_eq!(jobs.output(big).await.unwrap(), None);
}

/// `jobq_progress` and `jobq_output` report from SQL, fenced by the claim and attempt, and refuse bad
/// values with an error naming them.
#[tokio::test]
async fn the_sql_procedures_report_fenced_and_refuse_bad_values() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, state, claim, attempts) VALUES ('sql', 'running', 'c1', 2)",
    )
    .await;
    let id: u64 = db.scalar("SELECT MAX(id) FROM job_queue").await;
    let call = |sql: String| {
        let pool = db.pool.clone();
        async move { sqlx::query_scalar::<_, i64>(&sql).fetch_one(&pool).await }
    };
    assert_eq!(
        call(format!(
            "CALL jobq_progress({id}, 'c1', 2, 42.126, 'rows 42 of 100')"
        ))
        .await
        .unwrap(),
        1
    );
    assert_eq!(
        progress_row(&db, id.into()).await,
        Some((42.13, Some("rows 42 of 100".into()), 2))
    );
    // Another claim, or another attempt, changes nothing.
    for (claim, attempt) in [("c2", 2), ("c1", 1)] {
        let n = call(format!(
            "CALL jobq_progress({id}, '{claim}', {attempt}, 90, 'stale')"
        ))
        .await
        .unwrap();
        assert_eq!(n, 0);
    }
    assert_eq!(progress_row(&db, id.into()).await.unwrap().0, 42.13);
    let e = call(format!("CALL jobq_progress({id}, 'c1', 2, 120, NULL)"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("percent must be between 0 and 100"), "{e}");

    assert_eq!(
        call(format!(
            r#"CALL jobq_output({id}, 'c1', 2, '{{"ok": true}}')"#
        ))
        .await
        .unwrap(),
        1
    );
    let e = call(format!("CALL jobq_output({id}, 'c1', 2, 'not json')"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("the output is not JSON"), "{e}");
    let e = call(format!(
        "CALL jobq_output({id}, 'c1', 2, CONCAT('\"', REPEAT('x', 70000), '\"'))"
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("longer than 64 KiB"), "{e}");
    let jobs = jobq::Jobs::new(db.pool.clone());
    assert_eq!(
        jobs.output(id).await.unwrap().as_deref(),
        Some(r#"{"ok": true}"#)
    );
    // The output stays with the row after the job ends, and goes with it.
    db.exec(&format!(
        "UPDATE job_queue SET state = 'done', claim = NULL, finished_at = NOW(6) WHERE id = {id}"
    ))
    .await;
    assert!(jobs.output(id).await.unwrap().is_some());
    jobs.delete(id).await.unwrap();
    assert!(jobs.output(id).await.is_err(), "no job, no output");
}
