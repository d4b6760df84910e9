//! Debounced jobs (schema 26): a burst of enqueues of one kind and key becomes one job with the last
//! payload, bounded by a maximum wait; from the library, plain SQL and the CLI, under racing enqueuers
//! and a worker, and through every path that puts a job back in the queue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobq::testing::{Finish, claim_batch, finish};
use jobq::{Enqueued, Handlers, JobContext, NewJob, enqueue_many, enqueue_unique};

use crate::common::{TestDb, run_jobq, wait_until};

fn reindex(n: u64) -> NewJob {
    NewJob::new("reindex")
        .unique_key("customer:7")
        .debounce(Duration::from_secs(30))
        .payload(&serde_json::json!({ "n": n }))
        .unwrap()
}

async fn put(db: &TestDb, job: &NewJob) -> Enqueued {
    enqueue_unique(&db.pool, job).await.unwrap()
}

async fn payload_n(db: &TestDb, id: jobq::JobId) -> u64 {
    db.scalar(&format!(
        "SELECT CAST(JSON_VALUE(payload, '$.n') AS UNSIGNED) FROM job_queue WHERE id = {id}"
    ))
    .await
}

#[tokio::test]
async fn a_burst_becomes_one_job_with_the_last_payload() {
    let db = TestDb::new().await;
    let first = put(&db, &reindex(0)).await;
    assert!(matches!(first, Enqueued::Inserted(_)), "{first:?}");
    for n in 1..1000 {
        assert_eq!(put(&db, &reindex(n)).await, Enqueued::Merged(first.id()));
    }
    assert_eq!(db.scalar::<i64>("SELECT COUNT(*) FROM job_queue").await, 1);
    assert_eq!(payload_n(&db, first.id()).await, 999);
    let job = jobq::Jobs::new(db.pool.clone())
        .get(first.id())
        .await
        .unwrap();
    assert_eq!(job.debounced, 999);
    assert_eq!(job.debounce_key.as_deref(), Some("customer:7"));
    assert_eq!(job.unique_key, None, "a debounced key is not a unique key");
    assert_eq!(
        job.debounce_summary().as_deref(),
        Some("key \"customer:7\", 999 later enqueues merged")
    );
    // Due a window after the last enqueue (by the server's clock), not after the first.
    let ahead: i64 = db
        .scalar("SELECT TIMESTAMPDIFF(SECOND, NOW(6), run_at) FROM job_queue")
        .await;
    assert!((25..=30).contains(&ahead), "due in {ahead} s");
    // Another kind, or another key, is another job.
    let other_kind = NewJob::new("mail")
        .unique_key("customer:7")
        .debounce(Duration::from_secs(30));
    assert!(matches!(put(&db, &other_kind).await, Enqueued::Inserted(_)));
    let other_key = NewJob::new("reindex")
        .unique_key("customer:8")
        .debounce(Duration::from_secs(30));
    assert!(matches!(put(&db, &other_key).await, Enqueued::Inserted(_)));

    // It runs once, with the last payload.
    db.exec("UPDATE job_queue SET run_at = NOW(6)").await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handlers = {
        let seen = seen.clone();
        Handlers::new()
            .register("reindex", move |job: JobContext| {
                let seen = seen.clone();
                async move {
                    let v: serde_json::Value = job.payload()?;
                    seen.lock().unwrap().push(v["n"].as_u64());
                    Ok::<(), jobq::JobError>(())
                }
            })
            .unwrap()
            .register("mail", |_job: JobContext| async {
                Ok::<(), jobq::JobError>(())
            })
            .unwrap()
    };
    let report = db.worker(handlers).drain().await;
    assert_eq!(report.done, 3);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.contains(&Some(999)), "{seen:?}");
}

#[tokio::test]
async fn the_maximum_wait_bounds_a_steady_stream() {
    let db = TestDb::new().await;
    let job = |n: u64| {
        reindex(n)
            .debounce(Duration::from_secs(20))
            .debounce_max(Duration::from_secs(60))
    };
    let id = put(&db, &job(0)).await.id();
    // A stream that would keep pushing the run back by the window forever: pretend the first enqueue
    // was 50 s ago, so the next one may push the run only to the first enqueue + 60 s.
    db.exec("UPDATE job_queue SET created_at = created_at - INTERVAL 50 SECOND")
        .await;
    assert_eq!(put(&db, &job(1)).await, Enqueued::Merged(id));
    let (after_first, ahead): (i64, i64) = sqlx::query_as(
        "SELECT TIMESTAMPDIFF(SECOND, created_at, run_at), TIMESTAMPDIFF(SECOND, NOW(6), run_at) \
         FROM job_queue",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(after_first, 60, "capped at the first enqueue + the maximum");
    assert!((8..=10).contains(&ahead), "due in {ahead} s, not in 20");
    // Past the maximum, the job is due at once, and further enqueues keep it due.
    db.exec("UPDATE job_queue SET created_at = created_at - INTERVAL 30 SECOND")
        .await;
    assert_eq!(put(&db, &job(2)).await, Enqueued::Merged(id));
    let due: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE run_at <= NOW(6)")
        .await;
    assert_eq!(due, 1);
    assert_eq!(payload_n(&db, id).await, 2);
    // Without a maximum of its own, the maximum is ten windows.
    let plain = NewJob::new("ten")
        .unique_key("k")
        .debounce(Duration::from_secs(3));
    let id = put(&db, &plain).await.id();
    db.exec(&format!(
        "UPDATE job_queue SET created_at = created_at - INTERVAL 29 SECOND WHERE id = {id}"
    ))
    .await;
    put(&db, &plain).await;
    let ahead: i64 = db
        .scalar(&format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), run_at) FROM job_queue WHERE id = {id}"
        ))
        .await;
    assert!(
        ahead <= 1_000_000,
        "due {ahead} µs from now, capped at 30 s after the first"
    );
}

/// A running job has read its payload: an enqueue then queues a new job, which the next merge into.
/// Every path back to the queue (a release, a snooze, an interruption, a reaper's reset, an operator's
/// retry, a dependency's release) leaves debouncing, so none of them collides with that new job.
#[tokio::test]
async fn a_started_job_is_never_changed_and_never_collides_on_its_way_back() {
    let db = TestDb::new().await;
    let kinds = vec!["reindex".to_string()];
    let token = "host:1:1:1-1:00000000000000aa";
    for (round, back) in [
        Finish::Release,
        Finish::Snooze {
            delay: Duration::from_secs(60),
        },
        Finish::Interrupted {
            reason: "stopped".into(),
        },
    ]
    .into_iter()
    .enumerate()
    {
        db.exec("DELETE FROM job_queue").await;
        let first = put(&db, &reindex(1)).await.id();
        db.exec("UPDATE job_queue SET run_at = NOW(6)").await;
        let claimed = claim_batch(&db.pool, token, "default", &kinds, 1)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        let second = put(&db, &reindex(2)).await;
        assert!(matches!(second, Enqueued::Inserted(_)), "{second:?}");
        assert_eq!(
            payload_n(&db, first).await,
            1,
            "the running job keeps its payload"
        );
        assert_eq!(put(&db, &reindex(3)).await, Enqueued::Merged(second.id()));
        assert!(
            finish(&db.pool, first, token, 1, &back).await.unwrap(),
            "round {round}: {back:?}"
        );
        let row: (String, Option<Vec<u8>>) =
            sqlx::query_as("SELECT CAST(state AS CHAR), debounce_key FROM job_queue WHERE id = ?")
                .bind(first)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(row, ("queued".to_string(), None), "{back:?}");
        // The new job still takes the merges.
        assert_eq!(put(&db, &reindex(4)).await, Enqueued::Merged(second.id()));
    }

    // A reaper's reset of a dead claimant's job.
    db.exec("DELETE FROM job_queue").await;
    let first = put(&db, &reindex(1)).await.id();
    db.exec("UPDATE job_queue SET run_at = NOW(6)").await;
    let ghost = "ghost-host:4000001:1:1-1:00000000dead0001";
    claim_batch(&db.pool, ghost, "default", &kinds, 1)
        .await
        .unwrap();
    let second = put(&db, &reindex(2)).await.id();
    db.age_ghost_claims().await;
    let reaper = db.reaper();
    assert_eq!(reaper.run_once().await.unwrap().requeued, 1);
    assert_eq!(put(&db, &reindex(3)).await, Enqueued::Merged(second));
    assert_eq!(
        db.scalar::<i64>(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {first} AND state = 'queued' AND debounce_key IS NULL"
        ))
        .await,
        1
    );

    // An operator's retry of a done debounced job, while a queued one holds the key.
    db.exec(&format!(
        "UPDATE job_queue SET state = 'done', finished_at = NOW(6) WHERE id = {first}"
    ))
    .await;
    db.exec(&format!(
        "UPDATE job_queue SET debounce_key = 'customer:7' WHERE id = {first}"
    ))
    .await;
    jobq::Jobs::new(db.pool.clone()).retry(first).await.unwrap();
    assert_eq!(put(&db, &reindex(5)).await, Enqueued::Merged(second));

    // A waiting job with a debounce key (possible only from plain SQL) released by its dependency.
    db.exec("DELETE FROM job_queue").await;
    let held = put(&db, &reindex(1)).await.id();
    let dep = jobq::enqueue(&db.pool, &NewJob::new("first"))
        .await
        .unwrap();
    let waiting = jobq::enqueue(&db.pool, &NewJob::new("reindex").after([dep]))
        .await
        .unwrap();
    db.exec(&format!(
        "UPDATE job_queue SET debounce_key = 'customer:7' WHERE id = {waiting}"
    ))
    .await;
    db.exec(&format!(
        "UPDATE job_queue SET state = 'done', finished_at = NOW(6) WHERE id = {dep}"
    ))
    .await;
    let report = db.reaper().run_once().await.unwrap();
    assert_eq!(report.released_waiting, 1, "{report:?}");
    assert_eq!(put(&db, &reindex(2)).await, Enqueued::Merged(held));
}

#[tokio::test]
async fn plain_sql_debounces_in_one_statement() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    // docs/debounce.md's statement.
    let upsert = |n: u32| {
        format!(
            "INSERT INTO job_queue (kind, payload, debounce_key, run_at) \
             VALUES ('reindex', '{{\"customer\": 7, \"n\": {n}}}', 'customer:7', NOW(6) + INTERVAL 5 SECOND) \
             ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id), payload = VALUES(payload), \
               run_at = LEAST(VALUES(run_at), created_at + INTERVAL 1 MINUTE), debounced = debounced + 1"
        )
    };
    let first = sqlx::query(&upsert(1)).execute(&mut *conn).await.unwrap();
    assert_eq!(first.rows_affected(), 1);
    let merged = sqlx::query(&upsert(2)).execute(&mut *conn).await.unwrap();
    assert_eq!(merged.rows_affected(), 2);
    assert_eq!(merged.last_insert_id(), first.last_insert_id());
    let (n, debounced): (u64, u32) = sqlx::query_as(
        "SELECT CAST(JSON_VALUE(payload, '$.n') AS UNSIGNED), debounced FROM job_queue",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!((n, debounced), (2, 1));
    // The library merges into a job that plain SQL inserted, and the other way round.
    let lib = put(
        &db,
        &NewJob::new("reindex")
            .unique_key("customer:7")
            .debounce(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(lib, Enqueued::Merged(jobq::JobId(first.last_insert_id())));
    // The look-up is the UNIQUE index, as bytes.
    let plan =
        sqlx::query("EXPLAIN SELECT id FROM job_queue WHERE debounce_pending = ? AND kind = ?")
            .bind(b"customer:7".as_slice())
            .bind("reindex")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    use sqlx::Row;
    let key: Option<Vec<u8>> = plan[0].try_get("key").unwrap();
    assert_eq!(key.as_deref(), Some(b"debounce_pending_kind".as_slice()));
}

#[tokio::test]
async fn bad_debounce_settings_are_refused_naming_what_is_wrong() {
    let db = TestDb::new().await;
    let w = Duration::from_secs(5);
    for (job, needle) in [
        (
            NewJob::new("x").debounce(w),
            "invalid debounce: needs a unique key",
        ),
        (
            NewJob::new("x").unique_key("k").debounce(Duration::ZERO),
            "invalid debounce: the window must be above zero",
        ),
        (
            NewJob::new("x")
                .unique_key("k")
                .debounce(w)
                .debounce_max(Duration::from_secs(1)),
            "invalid debounce_max: 1s is shorter than the window (5s)",
        ),
        (
            NewJob::new("x")
                .unique_key("k")
                .debounce(w)
                .unique_for(Duration::from_secs(60)),
            "invalid debounce: cannot be combined with unique_for",
        ),
        (
            NewJob::new("x").unique_key("k").debounce(w).run_in(w),
            "invalid debounce: a debounced job runs its window after the last enqueue",
        ),
        (
            NewJob::new("x")
                .unique_key("k")
                .debounce(w)
                .debounce_max(Duration::from_secs(400 * 86_400)),
            "invalid debounce_max: is longer than a year",
        ),
    ] {
        let e = enqueue_unique(&db.pool, &job)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{e}");
    }
    assert_eq!(db.scalar::<i64>("SELECT COUNT(*) FROM job_queue").await, 0);
}

#[tokio::test]
async fn enqueue_many_merges_and_counts_only_new_jobs() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let d = |key: &str, n: u64, max: u64| {
        NewJob::new("reindex")
            .unique_key(key)
            .debounce(Duration::from_secs(5))
            .debounce_max(Duration::from_secs(max))
            .payload(&serde_json::json!({ "n": n }))
            .unwrap()
    };
    let batch = vec![
        d("a", 1, 60),
        d("a", 2, 60),
        d("b", 3, 120),
        NewJob::new("plain"),
        d("b", 4, 60),
    ];
    // a and b are new (2); the second a and the second b merge; the plain job is new (1).
    assert_eq!(enqueue_many(&mut conn, &batch).await.unwrap(), 3);
    assert_eq!(enqueue_many(&mut conn, &batch).await.unwrap(), 1);
    let rows: Vec<(Vec<u8>, u32)> = sqlx::query_as(
        "SELECT debounce_key, debounced FROM job_queue WHERE debounce_key IS NOT NULL ORDER BY debounce_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows, vec![(b"a".to_vec(), 3), (b"b".to_vec(), 3)]);
    let last: Vec<u64> = sqlx::query_scalar(
        "SELECT CAST(JSON_VALUE(payload, '$.n') AS UNSIGNED) FROM job_queue \
         WHERE debounce_key IS NOT NULL ORDER BY debounce_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // b's last payload is the last b of the call (sent in the statement of its own maximum).
    assert_eq!(last[0], 2);
    assert!(last[1] == 3 || last[1] == 4, "{last:?}");
}

/// 8 enqueuers × 60 enqueues of one key while a worker claims and runs the jobs: never two queued jobs
/// with the key, every enqueue is an insert or a merge into a job of the key, the merges counted on the
/// rows add up to the merges answered, and an enqueue made after all of them runs with its payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_enqueuers_leave_one_queued_job_and_the_last_payload_runs() {
    const ENQUEUERS: u64 = 8;
    const ROUNDS: u64 = 60;
    let db = TestDb::new().await;
    let pool = db.pool(ENQUEUERS as u32 + 4).await;
    let job = |n: u64| {
        NewJob::new("race")
            .unique_key("k")
            .debounce(Duration::from_millis(10))
            .debounce_max(Duration::from_millis(100))
            .payload(&serde_json::json!({ "n": n }))
            .unwrap()
    };
    let ran = Arc::new(Mutex::new(Vec::new()));
    let handlers = {
        let ran = ran.clone();
        Handlers::new()
            .register("race", move |job: JobContext| {
                let ran = ran.clone();
                async move {
                    let v: serde_json::Value = job.payload()?;
                    ran.lock().unwrap().push(v["n"].as_u64().unwrap());
                    Ok::<(), jobq::JobError>(())
                }
            })
            .unwrap()
    };
    let worker = db
        .worker(handlers)
        .config(|c| c.poll_interval = Duration::from_millis(5))
        .start()
        .await;
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (pool, done) = (pool.clone(), done.clone());
        tokio::spawn(async move {
            let (mut samples, mut most) = (0u64, 0i64);
            while !done.load(Ordering::Relaxed) {
                let queued: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM job_queue WHERE debounce_key = 'k' AND state = 'queued'",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                most = most.max(queued);
                samples += 1;
            }
            (samples, most)
        })
    };
    let merged = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for e in 0..ENQUEUERS {
        let (pool, merged) = (pool.clone(), merged.clone());
        tasks.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                let got = enqueue_unique(&pool, &job(e * 1000 + r)).await.unwrap();
                if matches!(got, Enqueued::Merged(_)) {
                    merged.fetch_add(1, Ordering::Relaxed);
                }
                // Spread over about a second, so that the worker claims jobs of the key (each due
                // within 100 ms of its first enqueue) while the others merge.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let (samples, most) = watcher.await.unwrap();
    let last = enqueue_unique(&pool, &job(999_999)).await.unwrap();
    wait_until("the last payload ran", Duration::from_secs(30), || async {
        ran.lock().unwrap().contains(&999_999)
    })
    .await;
    worker.stop().await;
    let merged = merged.load(Ordering::Relaxed) + u64::from(last.is_existing());
    let (rows, counted): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), CAST(SUM(debounced) AS SIGNED) FROM job_queue")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(most <= 1, "{most} queued jobs with one key");
    assert!(samples > 10, "watcher took {samples} samples");
    assert_eq!(rows as u64 + merged, ENQUEUERS * ROUNDS + 1);
    assert_eq!(counted as u64, merged);
    let runs = ran.lock().unwrap().len();
    assert_eq!(runs as i64, rows, "every job ran once");
    assert!(
        merged > 0 && rows > 1,
        "{rows} jobs, {merged} merged: the worker ran jobs while the enqueuers merged"
    );
    eprintln!(
        "debounce race: {} enqueues became {rows} jobs ({merged} merged)",
        ENQUEUERS * ROUNDS + 1
    );
}

#[tokio::test]
async fn the_cli_debounces_and_shows_what_it_did() {
    let db = TestDb::new().await;
    let url = Some(db.url.as_str());
    let args = |n: &str| {
        vec![
            "enqueue".to_string(),
            "reindex".into(),
            "--unique-key".into(),
            "customer:7".into(),
            "--debounce".into(),
            "5s".into(),
            "--debounce-max".into(),
            "1m".into(),
            "--payload".into(),
            format!("{{\"n\": {n}}}"),
        ]
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run_jobq(url, &a)
    };
    let first = run(args("1"));
    assert!(first.status.success(), "{first:?}");
    let id = String::from_utf8_lossy(&first.stdout).trim().to_string();
    let second = run(args("2"));
    assert_eq!(String::from_utf8_lossy(&second.stdout).trim(), id);
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!(
            "merged into job {id} (debounce key \"customer:7\")"
        )),
        "{err}"
    );
    let mut json = args("3");
    json.push("--json".into());
    let v: serde_json::Value = serde_json::from_slice(&run(json).stdout).unwrap();
    assert_eq!(v["merged"], serde_json::json!(true));
    assert_eq!(v["id"].to_string(), id);

    let show = run_jobq(url, &["jobs", "show", &id]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.contains("debounce:     key \"customer:7\", 2 later enqueues merged"),
        "{text}"
    );
    let show = run_jobq(url, &["jobs", "show", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["debounce_key"], serde_json::json!("customer:7"));
    assert_eq!(v["debounced"], serde_json::json!(2));

    for (bad, needle) in [
        (
            vec!["enqueue", "reindex", "--debounce", "5s"],
            "--unique-key",
        ),
        (
            vec![
                "enqueue",
                "reindex",
                "--unique-key",
                "k",
                "--debounce",
                "5s",
                "--debounce-max",
                "1s",
            ],
            "debounce_max: 1s is shorter than the window (5s)",
        ),
        (
            vec![
                "enqueue",
                "reindex",
                "--unique-key",
                "k",
                "--debounce",
                "5s",
                "--in",
                "1m",
            ],
            "cannot be used with",
        ),
    ] {
        let out = run_jobq(url, &bad);
        assert!(!out.status.success(), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{bad:?}: {err}");
    }

    // The dashboard's job page says it too.
    let app = jobq::web::router(db.pool.clone(), jobq::web::WebConfig::default()).unwrap();
    let (_, page) = crate::common::dashboard_get(&app, &format!("/jobs/{id}")).await;
    assert!(
        page.contains(
            "<dt>debounce</dt><dd>key &quot;customer:7&quot;, 2 later enqueues merged</dd>"
        ),
        "{page}"
    );
}

/// Pending debounced jobs (due later) cost a claim of other jobs nothing: the claim's index walk stops
/// at the first row not yet due, however many wait behind it.
#[tokio::test]
async fn pending_debounced_jobs_cost_the_claim_nothing() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 10).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let [pick, walk] = crate::common::claim_selects("default", "h", &["k"], 10);
    let (_, before_pick) = crate::common::rows_and_read_next(&mut conn, &pick).await;
    let (_, before_walk) = crate::common::rows_and_read_next(&mut conn, &walk).await;
    let pending: Vec<NewJob> = (0..2000)
        .map(|i| {
            NewJob::new("k")
                .unique_key(format!("key:{i}"))
                .debounce(Duration::from_secs(60))
        })
        .collect();
    assert_eq!(enqueue_many(&mut conn, &pending).await.unwrap(), 2000);
    let (rows, after_pick) = crate::common::rows_and_read_next(&mut conn, &pick).await;
    let (_, after_walk) = crate::common::rows_and_read_next(&mut conn, &walk).await;
    assert_eq!(rows.len(), 10);
    assert_eq!(
        (before_pick, before_walk),
        (after_pick, after_walk),
        "Handler_read_next of the claim's two SELECTs"
    );
}
