//! Jobs that wait for other jobs: never claimed early, released once every dependency is done,
//! cancelled (naming which) when one ends dead or cancelled, and outside the claim index meanwhile.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobq::{
    Handlers, JobContext, JobError, JobId, Mode, NewJob, Reaper, ReaperConfig, Worker, WorkerConfig,
};

use crate::common::{TestDb, claim_selects, rows_and_read_next, run_jobq, wait_until};

/// When each job's handler started and ended, by kind.
type Timeline = Arc<Mutex<Vec<(String, &'static str, Instant)>>>;

fn recording(kinds: &[&str], timeline: &Timeline, hold: Duration) -> Handlers {
    let mut h = Handlers::new();
    for kind in kinds {
        let timeline = timeline.clone();
        h = h
            .register(kind, move |job: JobContext| {
                let timeline = timeline.clone();
                async move {
                    timeline
                        .lock()
                        .unwrap()
                        .push((job.kind.clone(), "start", Instant::now()));
                    tokio::time::sleep(hold).await;
                    if job.kind == "fails" {
                        return Err(JobError::fatal("no"));
                    }
                    timeline
                        .lock()
                        .unwrap()
                        .push((job.kind.clone(), "end", Instant::now()));
                    Ok(())
                }
            })
            .unwrap();
    }
    h
}

/// A reaper pass every 100 ms until `stop`: what releases and cancels waiting jobs.
fn sweeping(db: &TestDb, stop: &jobq::CancellationToken) -> tokio::task::JoinHandle<()> {
    let pool = db.pool.clone();
    let stop = stop.clone();
    tokio::spawn(async move {
        let reaper = Reaper::new(pool, ReaperConfig::default()).unwrap();
        while !stop.is_cancelled() {
            reaper.run_once().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

async fn state_of(db: &TestDb, id: JobId) -> String {
    db.scalar(&format!(
        "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = {}",
        id.0
    ))
    .await
}

/// first ← second ← third, while a free job runs at once: each link starts only after the one it
/// waits for has ended, and waits as `waiting` meanwhile.
#[tokio::test]
async fn a_chain_runs_in_order_and_never_early() {
    let db = TestDb::new().await;
    let first = jobq::enqueue(&db.pool, &NewJob::new("first"))
        .await
        .unwrap();
    let second = jobq::enqueue(&db.pool, &NewJob::new("second").after([first]))
        .await
        .unwrap();
    let third = jobq::enqueue(&db.pool, &NewJob::new("third").after([second, first]))
        .await
        .unwrap();
    jobq::enqueue(&db.pool, &NewJob::new("free")).await.unwrap();
    assert_eq!(state_of(&db, third).await, "waiting");
    let timeline: Timeline = Arc::default();
    let stop = jobq::CancellationToken::new();
    let sweeper = sweeping(&db, &stop);
    let worker = Worker::new(
        db.pool(4).await,
        recording(
            &["first", "second", "third", "free"],
            &timeline,
            Duration::from_millis(300),
        ),
        WorkerConfig {
            mode: Mode::Forever,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let task = tokio::spawn(worker.run(stop.clone()));
    wait_until("the chain done", Duration::from_secs(30), || async {
        db.states().await == "done=4"
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
    sweeper.await.unwrap();
    let t = timeline.lock().unwrap().clone();
    let at = |kind: &str, what: &str| {
        t.iter()
            .find(|(k, w, _)| k == kind && *w == what)
            .map(|(_, _, i)| *i)
            .unwrap_or_else(|| panic!("no {what} of {kind}: {t:?}"))
    };
    assert!(at("second", "start") >= at("first", "end"), "{t:?}");
    assert!(at("third", "start") >= at("second", "end"), "{t:?}");
    assert!(
        at("free", "start") < at("first", "end"),
        "the free job waited: {t:?}"
    );
    let edges: i64 = db.scalar("SELECT COUNT(*) FROM jobq_job_deps").await;
    assert_eq!(edges, 0, "edges of released jobs are forgotten");
}

/// A dependency that dies cancels the job waiting for it, naming it, and the cancel travels down the
/// chain; a job waiting for a missing job is refused with nothing written.
#[tokio::test]
async fn a_dead_dependency_cancels_its_dependents_and_a_missing_one_is_refused() {
    let db = TestDb::new().await;
    let fails = jobq::enqueue(&db.pool, &NewJob::new("fails").max_attempts(1))
        .await
        .unwrap();
    let next = jobq::enqueue(&db.pool, &NewJob::new("first").after([fails]))
        .await
        .unwrap();
    let last = jobq::enqueue(&db.pool, &NewJob::new("second").after([next]))
        .await
        .unwrap();
    let e = jobq::enqueue(&db.pool, &NewJob::new("x").after([JobId(999_999)]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("job 999999 does not exist"), "{e}");
    let rows: i64 = db.scalar("SELECT COUNT(*) FROM job_queue").await;
    assert_eq!(rows, 3, "nothing written for the refused job");
    let timeline: Timeline = Arc::default();
    let stop = jobq::CancellationToken::new();
    let sweeper = sweeping(&db, &stop);
    let worker = Worker::new(
        db.pool(4).await,
        recording(&["fails", "first", "second"], &timeline, Duration::ZERO),
        WorkerConfig {
            mode: Mode::Forever,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let task = tokio::spawn(worker.run(stop.clone()));
    wait_until("the chain cancelled", Duration::from_secs(20), || async {
        db.states().await == "cancelled=2 dead=1"
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
    sweeper.await.unwrap();
    let why: String = db
        .scalar(&format!(
            "SELECT last_error FROM job_queue WHERE id = {}",
            next.0
        ))
        .await;
    assert_eq!(
        why,
        format!(
            "cancelled: job {}, which it waited for, ended dead",
            fails.0
        )
    );
    let why_last: String = db
        .scalar(&format!(
            "SELECT last_error FROM job_queue WHERE id = {}",
            last.0
        ))
        .await;
    assert!(why_last.contains(&format!("job {}", next.0)), "{why_last}");
    assert!(
        timeline
            .lock()
            .unwrap()
            .iter()
            .all(|(k, _, _)| k == "fails"),
        "a dependent ran"
    );
    let out = run_jobq(Some(&db.url), &["enqueue", "x", "--after", "999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

/// However many jobs wait, a claim reads none of them: waiting rows are outside the claim index.
#[tokio::test]
async fn waiting_jobs_cost_a_claim_nothing() {
    let db = TestDb::new().await;
    let first = jobq::enqueue(&db.pool, &NewJob::new("first"))
        .await
        .unwrap();
    for _ in 0..5 {
        jobq::enqueue(&db.pool, &NewJob::new("w").after([first]))
            .await
            .unwrap();
    }
    db.exec("INSERT INTO job_queue (kind, state) SELECT 'w', 'waiting' FROM seq_1_to_5000")
        .await;
    db.exec("UPDATE job_queue SET state = 'done' WHERE kind = 'first'")
        .await;
    let pool = db.pool(1).await;
    let mut conn = pool.acquire().await.unwrap();
    for sql in claim_selects("default", "h", &["w"], 10) {
        let (rows, read_next) = rows_and_read_next(&mut conn, &sql).await;
        assert!(rows.is_empty());
        assert_eq!(read_next, "0", "the claim read waiting rows: {sql}");
    }
}

/// A batch's callback waits until every member has ended, whatever the outcome, and runs once with
/// the outcome counts in its payload; a member's failure does not cancel it.
#[tokio::test]
async fn a_batch_callback_runs_once_all_members_ended_with_their_counts() {
    let db = TestDb::new().await;
    let ok = jobq::enqueue(&db.pool, &NewJob::new("first"))
        .await
        .unwrap();
    let dead = jobq::enqueue(&db.pool, &NewJob::new("fails").max_attempts(1))
        .await
        .unwrap();
    let dropped = jobq::enqueue(
        &db.pool,
        &NewJob::new("first").run_in(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let callback = jobq::enqueue(
        &db.pool,
        &NewJob::new("callback")
            .payload(&serde_json::json!({"batch": "nightly"}))
            .unwrap()
            .after_all_ended([ok, dead, dropped]),
    )
    .await
    .unwrap();
    let e = jobq::enqueue(
        &db.pool,
        &NewJob::new("callback")
            .payload_json("[1]")
            .unwrap()
            .after_all_ended([ok]),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("must be a JSON object"), "{e}");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let handlers = {
        let seen = seen.clone();
        recording(&["first", "fails"], &Timeline::default(), Duration::ZERO)
            .register("callback", move |job: JobContext| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(job.payload_str().to_string());
                    Ok::<(), JobError>(())
                }
            })
            .unwrap()
    };
    let stop = jobq::CancellationToken::new();
    let sweeper = sweeping(&db, &stop);
    let worker = Worker::new(
        db.pool(4).await,
        handlers,
        WorkerConfig {
            mode: Mode::Forever,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let task = tokio::spawn(worker.run(stop.clone()));
    wait_until("two members ended", Duration::from_secs(20), || async {
        db.states().await == "dead=1 done=1 queued=1 waiting=1"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        state_of(&db, callback).await,
        "waiting",
        "ran before every member ended"
    );
    jobq::Jobs::new(db.pool.clone())
        .cancel(dropped)
        .await
        .unwrap();
    wait_until("the callback done", Duration::from_secs(20), || async {
        state_of(&db, callback).await == "done"
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
    sweeper.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let payload: serde_json::Value = serde_json::from_str(&seen[0]).unwrap();
    assert_eq!(
        payload,
        serde_json::json!({"batch": "nightly", "jobq_batch": {"done": 1, "dead": 1, "cancelled": 1}})
    );
}
