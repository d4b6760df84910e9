//! Jobs that wait for other jobs: never claimed early, released once every dependency is done,
//! cancelled (naming which) when one ends dead or cancelled, and outside the claim index meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobq::{Handlers, JobContext, JobError, JobId, NewJob, Reaper, ReaperConfig};

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
struct Sweeper {
    task: tokio::task::JoinHandle<()>,
    /// Passes made so far.
    passes: Arc<AtomicU64>,
}

fn sweeping(db: &TestDb, stop: &jobq::CancellationToken) -> Sweeper {
    let pool = db.pool.clone();
    let stop = stop.clone();
    let passes = Arc::new(AtomicU64::new(0));
    let made = passes.clone();
    let task = tokio::spawn(async move {
        let reaper = Reaper::new(pool, ReaperConfig::default()).unwrap();
        while !stop.is_cancelled() {
            reaper.run_once().await.unwrap();
            made.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    Sweeper { task, passes }
}

impl Sweeper {
    /// Waits until the sweeper has made two more passes than it had: one began after this call.
    async fn two_more_passes(&self) {
        let seen = self.passes.load(Ordering::SeqCst);
        wait_until(
            "two more reaper passes",
            Duration::from_secs(10),
            || async { self.passes.load(Ordering::SeqCst) >= seen + 2 },
        )
        .await;
    }
}

async fn state_of(db: &TestDb, id: JobId) -> String {
    db.scalar(&format!(
        "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = {}",
        id.0
    ))
    .await
}

async fn last_error_of(db: &TestDb, id: JobId) -> String {
    db.scalar(&format!(
        "SELECT last_error FROM job_queue WHERE id = {}",
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
    let handlers = recording(
        &["first", "second", "third", "free"],
        &timeline,
        Duration::from_millis(300),
    );
    let worker = db.worker(handlers).start().await;
    wait_until("the chain done", Duration::from_secs(30), || async {
        db.states().await == "done=4"
    })
    .await;
    worker.stop().await;
    stop.cancel();
    sweeper.task.await.unwrap();
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
    let worker = db
        .worker(recording(
            &["fails", "first", "second"],
            &timeline,
            Duration::ZERO,
        ))
        .start()
        .await;
    wait_until("the chain cancelled", Duration::from_secs(20), || async {
        db.states().await == "cancelled=2 dead=1"
    })
    .await;
    worker.stop().await;
    stop.cancel();
    sweeper.task.await.unwrap();
    let why: String = last_error_of(&db, next).await;
    assert_eq!(
        why,
        format!(
            "cancelled: job {}, which it waited for, ended dead",
            fails.0
        )
    );
    let why_last: String = last_error_of(&db, last).await;
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
    let worker = db.worker(handlers).start().await;
    wait_until("two members ended", Duration::from_secs(20), || async {
        db.states().await == "dead=1 done=1 queued=1 waiting=1"
    })
    .await;
    // The reaper and the worker have both looked again since, and left the callback waiting.
    sweeper.two_more_passes().await;
    worker.settled().await;
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
    worker.stop().await;
    stop.cancel();
    sweeper.task.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let payload: serde_json::Value = serde_json::from_str(&seen[0]).unwrap();
    assert_eq!(
        payload,
        serde_json::json!({"batch": "nightly", "jobq_batch": {"done": 1, "dead": 1, "cancelled": 1}})
    );
}

/// A worker and nothing else (no reaper): the finish of a job's last dependency queues it, in the
/// finishing transaction. Covers a chain, a batch callback whose member died, a dependent enqueued
/// while its dependency runs, one enqueued after its dependency is done, and a failure cancelling its
/// dependent.
#[tokio::test]
async fn dependents_run_after_their_dependencies_with_no_reaper() {
    let db = TestDb::new().await;
    let first = jobq::enqueue(&db.pool, &NewJob::new("first"))
        .await
        .unwrap();
    let second = jobq::enqueue(&db.pool, &NewJob::new("second").after([first]))
        .await
        .unwrap();
    let fails = jobq::enqueue(&db.pool, &NewJob::new("fails").max_attempts(1))
        .await
        .unwrap();
    let callback = jobq::enqueue(
        &db.pool,
        &NewJob::new("callback").after_all_ended([first, fails]),
    )
    .await
    .unwrap();
    let doomed = jobq::enqueue(&db.pool, &NewJob::new("third").after([fails]))
        .await
        .unwrap();
    // `slow` holds its slot until told, so a dependent can be enqueued while it runs.
    let release = Arc::new(tokio::sync::Notify::new());
    let timeline: Timeline = Arc::default();
    let mut handlers = recording(
        &["first", "second", "fails", "callback", "third", "late"],
        &timeline,
        Duration::ZERO,
    );
    handlers = handlers
        .register("slow", {
            let release = release.clone();
            move |_job: JobContext| {
                let release = release.clone();
                async move {
                    release.notified().await;
                    Ok(())
                }
            }
        })
        .unwrap();
    let slow = jobq::enqueue(&db.pool, &NewJob::new("slow")).await.unwrap();
    let worker = db.worker(handlers).start().await;
    wait_until("slow running", Duration::from_secs(20), || async {
        state_of(&db, slow).await == "running"
    })
    .await;
    let after_slow = jobq::enqueue(&db.pool, &NewJob::new("late").after([slow]))
        .await
        .unwrap();
    assert_eq!(state_of(&db, after_slow).await, "waiting");
    release.notify_one();
    wait_until(
        "every dependent settled",
        Duration::from_secs(30),
        || async { db.states().await == "cancelled=1 dead=1 done=5" },
    )
    .await;
    // Enqueued once its dependency is done: queued at once, and run.
    let after_done = jobq::enqueue(&db.pool, &NewJob::new("late").after([first, slow]))
        .await
        .unwrap();
    wait_until(
        "the late dependent done",
        Duration::from_secs(20),
        || async { state_of(&db, after_done).await == "done" },
    )
    .await;
    worker.stop().await;
    assert_eq!(state_of(&db, second).await, "done");
    assert_eq!(state_of(&db, callback).await, "done");
    assert_eq!(state_of(&db, after_slow).await, "done");
    assert_eq!(state_of(&db, doomed).await, "cancelled");
    let why: String = last_error_of(&db, doomed).await;
    assert_eq!(
        why,
        format!(
            "cancelled: job {}, which it waited for, ended dead",
            fails.0
        )
    );
    let batch: String = db
        .scalar(&format!(
            "SELECT CAST(JSON_EXTRACT(payload, '$.jobq_batch') AS CHAR) FROM job_queue WHERE id = {}",
            callback.0
        ))
        .await;
    let batch: serde_json::Value = serde_json::from_str(&batch).unwrap();
    assert_eq!(
        batch,
        serde_json::json!({"done": 1, "dead": 1, "cancelled": 0})
    );
    let t = timeline.lock().unwrap().clone();
    let at = |kind: &str, what: &str| {
        t.iter()
            .find(|(k, w, _)| k == kind && *w == what)
            .map(|(_, _, i)| *i)
            .unwrap_or_else(|| panic!("no {what} of {kind}: {t:?}"))
    };
    assert!(at("second", "start") >= at("first", "end"), "{t:?}");
    let edges: i64 = db.scalar("SELECT COUNT(*) FROM jobq_job_deps").await;
    assert_eq!(edges, 0, "edges of settled jobs are forgotten");
}

/// Through the documented SQL path a job can wait in a cycle, for itself, or for a job that does not
/// exist: one reaper pass cancels each, and `last_error` names the cause. A job waiting for a job of
/// the cycle is cancelled with it; a plain waiting job is left alone.
#[tokio::test]
async fn a_reaper_pass_cancels_cycles_self_waits_and_missing_dependencies_saying_why() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (id, kind, state) VALUES (4, 'x', 'waiting'), (7, 'x', 'waiting'), \
         (9, 'x', 'waiting'), (10, 'x', 'waiting'), (11, 'x', 'waiting'), (20, 'x', 'queued'), \
         (21, 'x', 'waiting')",
    )
    .await;
    db.exec(
        "INSERT INTO jobq_job_deps (job_id, after_id) VALUES (4, 7), (7, 4), (9, 9), (10, 12), \
         (11, 4), (21, 20)",
    )
    .await;
    let reaper = Reaper::new(db.pool.clone(), ReaperConfig::default()).unwrap();
    let first = reaper.run_once().await.unwrap();
    assert_eq!(first.cancelled_waiting, 5, "{first:?}");
    let error = |id: u64| {
        let db = &db;
        async move {
            db.scalar::<String>(&format!(
                "SELECT CAST(CONCAT(state, ': ', COALESCE(last_error, '-')) AS CHAR) \
                 FROM job_queue WHERE id = {id}"
            ))
            .await
        }
    };
    assert_eq!(
        error(4).await,
        "cancelled: in a dependency cycle: 4 -> 7 -> 4"
    );
    assert_eq!(
        error(7).await,
        "cancelled: in a dependency cycle: 7 -> 4 -> 7"
    );
    assert_eq!(error(9).await, "cancelled: in a dependency cycle: 9 -> 9");
    assert_eq!(
        error(10).await,
        "cancelled: waits on job 12, which does not exist"
    );
    assert_eq!(
        error(11).await,
        "cancelled: cancelled: job 4, which it waited for, ended cancelled"
    );
    assert_eq!(error(21).await, "waiting: -", "its dependency is queued");
    let again = reaper.run_once().await.unwrap();
    assert_eq!(again.cancelled_waiting, 0, "{again:?}");
    assert_eq!(error(21).await, "waiting: -");
    let edges: i64 = db.scalar("SELECT COUNT(*) FROM jobq_job_deps").await;
    assert_eq!(edges, 1, "only the edge of the job still waiting is kept");
}

/// A job waiting for others is a job like any other: `jobq jobs` cancels and retries it (runs it now,
/// without waiting), it can be deleted, lists it by state, and `jobs show` (text and JSON) and the API
/// name what it waits for and what waits for it, with their states.
#[tokio::test]
async fn waiting_jobs_can_be_cancelled_retried_deleted_listed_and_shown() {
    let db = TestDb::new().await;
    let parent = jobq::enqueue(&db.pool, &NewJob::new("parent"))
        .await
        .unwrap();
    let ids: Vec<JobId> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(
                jobq::enqueue(&db.pool, &NewJob::new("child").after([parent]))
                    .await
                    .unwrap(),
            );
        }
        v
    };
    let grandchild = jobq::enqueue(&db.pool, &NewJob::new("grandchild").after([ids[0]]))
        .await
        .unwrap();
    let jobq = |args: &[&str]| {
        let out = run_jobq(Some(&db.url), args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {text}{err}");
        text
    };
    let list = jobq(&["jobs", "list", "--state", "waiting", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 4, "{list}");

    let shown = jobq(&["jobs", "show", &ids[0].to_string()]);
    assert!(
        shown.contains(&format!("waits for:    {} (queued)", parent.0)),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("dependents:   {} (waiting)", grandchild.0)),
        "{shown}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&jobq(&["jobs", "show", &parent.to_string(), "--json"])).unwrap();
    let dependents: Vec<u64> = json["dependents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_u64().unwrap())
        .collect();
    assert_eq!(dependents, ids.iter().map(|i| i.0).collect::<Vec<_>>());
    assert_eq!(json["dependents"][0]["state"], "waiting");
    assert_eq!(json["waits_for"], serde_json::json!([]));

    // Cancel: at once, and what waited for it is cancelled with it.
    let said = jobq(&["jobs", "cancel", &ids[0].to_string()]);
    assert!(said.contains("is cancelled"), "{said}");
    assert_eq!(state_of(&db, ids[0]).await, "cancelled");
    assert_eq!(state_of(&db, grandchild).await, "cancelled");
    // Retry: queued to run now, no longer waiting.
    jobq(&["jobs", "retry", &ids[1].to_string()]);
    assert_eq!(state_of(&db, ids[1]).await, "queued");
    // Delete (there is no `jobs delete`; the library's and the dashboard's delete are one function).
    jobq::Jobs::new(db.pool.clone())
        .delete(ids[2])
        .await
        .unwrap();
    let left: i64 = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {}",
            ids[2].0
        ))
        .await;
    assert_eq!(left, 0);
    let edges: i64 = db.scalar("SELECT COUNT(*) FROM jobq_job_deps").await;
    assert_eq!(edges, 0, "no edge of a job that no longer waits is left");

    // The API says the same as `jobs show --json`.
    let app = jobq::web::router(db.pool.clone(), jobq::web::WebConfig::default()).unwrap();
    let waiting = jobq::enqueue(&db.pool, &NewJob::new("child").after([parent]))
        .await
        .unwrap();
    let api = body_of(&app, &format!("/api/jobs/{}", waiting.0)).await;
    let api: serde_json::Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api["state"], "waiting");
    assert_eq!(
        api["waits_for"],
        serde_json::json!([{"id": parent.0, "state": "queued", "until": "done"}])
    );
    let page = body_of(&app, &format!("/jobs/{}", waiting.0)).await;
    assert!(
        page.contains(&format!("<li data-job=\"{}\">", parent.0))
            && page.contains("Run now without waiting"),
        "{page}"
    );
}

/// A GET through the dashboard's router, its body.
async fn body_of(app: &axum::Router, uri: &str) -> String {
    use tower::ServiceExt;
    let resp = app
        .clone()
        .oneshot(
            axum::http::Request::get(uri)
                .header("host", "127.0.0.1:8080")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{uri}");
    let bytes = axum::body::to_bytes(resp.into_body(), 10 << 20)
        .await
        .unwrap();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Waiting jobs are counted everywhere jobs are: the overview's state cards and per-queue table, and
/// jobs that have waited longer than the threshold (1 h by default) in `jobq stats` (text and JSON)
/// and on the overview.
#[tokio::test]
async fn waiting_jobs_and_long_waits_are_counted_in_stats_and_the_overview() {
    let db = TestDb::new().await;
    let parent = jobq::enqueue(&db.pool, &NewJob::new("parent").queue("mail"))
        .await
        .unwrap();
    for _ in 0..3 {
        jobq::enqueue(
            &db.pool,
            &NewJob::new("child").queue("mail").after([parent]),
        )
        .await
        .unwrap();
    }
    db.exec("UPDATE job_queue SET created_at = NOW(6) - INTERVAL 2 HOUR WHERE state = 'waiting' LIMIT 2")
        .await;
    let out = run_jobq(Some(&db.url), &["stats", "--json"]);
    assert!(out.status.success());
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["long_waiting"]["count"], 2, "{stats}");
    assert_eq!(stats["long_waiting"]["over_secs"], 3600.0);
    let out = run_jobq(Some(&db.url), &["stats", "--long-wait", "3h"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("waited for other jobs longer"), "{text}");
    let out = run_jobq(Some(&db.url), &["stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("2 job(s) have waited for other jobs longer than 1h"),
        "{text}"
    );

    let app = jobq::web::router(db.pool.clone(), jobq::web::WebConfig::default()).unwrap();
    let page = body_of(&app, "/").await;
    assert!(
        page.contains("<a class=\"card\" href=\"/jobs?state=waiting\"><b>3</b>waiting</a>"),
        "the state cards count waiting jobs: {page}"
    );
    assert!(
        page.contains(
            "data-state=\"waiting\"><a href=\"/jobs?queue=mail&amp;state=waiting\">3</a>"
        ),
        "the queue's line counts its waiting jobs: {page}"
    );
    assert!(
        page.contains("id=\"waiting-long\"")
            && page.contains("<b>2</b>waiting for other jobs over 1h"),
        "{page}"
    );
    let jobs = body_of(&app, "/jobs?state=waiting").await;
    assert!(jobs.contains("<option selected>waiting</option>"), "{jobs}");
    let o: serde_json::Value = serde_json::from_str(&body_of(&app, "/api/overview").await).unwrap();
    assert_eq!(o["long_waiting"]["count"], 2);
    let waiting = o["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["state"] == "waiting")
        .unwrap_or_else(|| panic!("{o}"));
    assert_eq!(waiting["count"], 3);
}
