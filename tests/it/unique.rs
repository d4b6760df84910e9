//! Unique jobs (migration 0012): a live job holds its key against a second enqueue, from the library,
//! plain SQL and the CLI, also under concurrent enqueuers while a worker finishes jobs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use jobq::{Enqueued, Handlers, JobContext, NewJob, enqueue_many, enqueue_unique};

use crate::common::{TestDb, run_jobq};

const LIVE: &str = "state IN ('queued', 'retry', 'running')";

async fn put(db: &TestDb, job: NewJob) -> Enqueued {
    enqueue_unique(&db.pool, &job).await.unwrap()
}

async fn set_state(db: &TestDb, id: jobq::JobId, state: &str, finished: &str) {
    db.exec(&format!(
        "UPDATE job_queue SET state = '{state}', finished_at = {finished} WHERE id = {id}"
    ))
    .await;
}

async fn rows(db: &TestDb) -> i64 {
    db.scalar("SELECT COUNT(*) FROM job_queue").await
}

#[tokio::test]
async fn a_live_job_holds_its_key_and_a_finished_one_frees_it() {
    let db = TestDb::new().await;
    let job = || NewJob::new("sync").unique_key("user:42");
    let first = put(&db, job()).await;
    assert!(matches!(first, Enqueued::Inserted(_)), "{first:?}");
    let id = first.id();
    assert_eq!(put(&db, job()).await, Enqueued::Existing(id));
    // Another key, or no key, is another job.
    assert!(
        !put(&db, NewJob::new("sync").unique_key("user:43"))
            .await
            .is_existing()
    );
    assert!(!put(&db, NewJob::new("sync")).await.is_existing());
    // Byte for byte: no padding, no case folding.
    assert!(
        !put(&db, NewJob::new("sync").unique_key("user:42 "))
            .await
            .is_existing()
    );
    assert!(
        !put(&db, NewJob::new("sync").unique_key("USER:42"))
            .await
            .is_existing()
    );

    for state in ["running", "retry"] {
        set_state(&db, id, state, "NULL").await;
        assert_eq!(put(&db, job()).await, Enqueued::Existing(id), "{state}");
    }
    // A key of a done, dead or cancelled job is free again; the new job holds it in turn.
    let mut holder = id;
    for state in ["done", "dead", "cancelled"] {
        set_state(&db, holder, state, "NOW(6)").await;
        let next = put(&db, job()).await;
        assert!(!next.is_existing(), "{state}: {next:?}");
        assert_ne!(next.id(), holder);
        assert_eq!(put(&db, job()).await, Enqueued::Existing(next.id()));
        holder = next.id();
    }
    assert_eq!(
        db.scalar::<i64>(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE unique_key = 'user:42' AND {LIVE}"
        ))
        .await,
        1
    );
    // An operator's retry of the first (done) job would make a second live holder: refused with an
    // error naming the holder (not the server's raw 1062), unchanged.
    let e = jobq::Jobs::new(db.pool.clone())
        .retry(id)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, jobq::Error::UniqueKeyHeld { holder: h, .. } if *h == holder),
        "{e:?}"
    );
    let e = e.to_string();
    assert!(
        e.contains(&format!(
            "job {holder} (sync, queued) holds its unique key \"user:42\""
        )),
        "{e}"
    );
    assert!(!e.contains("Duplicate entry"), "{e}");
    let out = run_jobq(Some(&db.url), &["jobs", "retry", &id.to_string()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("holds its unique key") && !stderr.contains("1062"),
        "{stderr}"
    );
    assert_eq!(
        db.scalar::<String>(&format!(
            "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = {id}"
        ))
        .await,
        "done"
    );
    // jobs show carries the key.
    let shown = jobq::testing::get_job(&db.pool, holder.0).await.unwrap();
    assert_eq!(shown.unique_key.as_deref(), Some("user:42"));
}

/// A key is unique within its kind: two kinds hold the same key at once, from the library and from
/// plain SQL, while a second live job of one kind is still refused.
#[tokio::test]
async fn a_key_is_unique_within_its_kind() {
    let db = TestDb::new().await;
    let mail = put(&db, NewJob::new("mail").unique_key("user:42")).await;
    let sync = put(&db, NewJob::new("sync").unique_key("user:42")).await;
    assert!(
        !mail.is_existing() && !sync.is_existing(),
        "{mail:?} {sync:?}"
    );
    assert_ne!(mail.id(), sync.id());
    assert_eq!(
        put(&db, NewJob::new("mail").unique_key("user:42")).await,
        Enqueued::Existing(mail.id())
    );
    assert_eq!(
        put(
            &db,
            NewJob::new("sync")
                .unique_key("user:42")
                .unique_for(Duration::from_secs(60))
        )
        .await,
        Enqueued::Existing(sync.id())
    );
    db.exec("INSERT INTO job_queue (kind, unique_key) VALUES ('report', 'user:42')")
        .await;
    let e = sqlx::query("INSERT INTO job_queue (kind, unique_key) VALUES ('report', 'user:42')")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Duplicate entry"), "{e}");
    assert_eq!(
        db.scalar::<i64>(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE unique_key = 'user:42' AND {LIVE}"
        ))
        .await,
        3
    );
}

#[tokio::test]
async fn a_period_keeps_the_key_of_a_done_job_for_that_long() {
    let db = TestDb::new().await;
    let hourly = || {
        NewJob::new("report")
            .unique_key("report:daily")
            .unique_for(Duration::from_secs(3600))
    };
    let first = put(&db, hourly()).await.id();
    assert_eq!(put(&db, hourly()).await, Enqueued::Existing(first));
    set_state(&db, first, "done", "NOW(6) - INTERVAL 10 MINUTE").await;
    // Done ten minutes ago: held for a period of an hour, free without a period.
    assert_eq!(put(&db, hourly()).await, Enqueued::Existing(first));
    let free = NewJob::new("report").unique_key("report:daily");
    let second = put(&db, free.clone()).await;
    assert!(!second.is_existing(), "{second:?}");
    // A live job is preferred to a recently done one.
    assert_eq!(put(&db, hourly()).await, Enqueued::Existing(second.id()));
    set_state(&db, second.id(), "done", "NOW(6) - INTERVAL 2 HOUR").await;
    set_state(&db, first, "done", "NOW(6) - INTERVAL 2 HOUR").await;
    let third = put(&db, hourly()).await;
    assert!(!third.is_existing(), "finished two hours ago: {third:?}");
    // A dead job does not hold its key for a period: only done counts as "ran recently".
    set_state(&db, third.id(), "dead", "NOW(6)").await;
    assert!(!put(&db, hourly()).await.is_existing());
}

#[tokio::test]
async fn enqueue_many_skips_jobs_whose_key_is_held() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let batch = vec![
        NewJob::new("a").unique_key("k1"),
        NewJob::new("a").unique_key("k1").priority(5),
        NewJob::new("c").unique_key("k2"),
        NewJob::new("d"),
    ];
    // The first of two jobs of one kind with one key wins, within the call too.
    assert_eq!(enqueue_many(&mut conn, &batch).await.unwrap(), 3);
    assert_eq!(
        db.scalar::<i64>("SELECT priority FROM job_queue WHERE unique_key = 'k1'")
            .await,
        0
    );
    assert_eq!(enqueue_many(&mut conn, &batch).await.unwrap(), 1);
    db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6) WHERE unique_key = 'k2'")
        .await;
    let again = vec![
        NewJob::new("c").unique_key("k2"),
        NewJob::new("c")
            .unique_key("k2")
            .unique_for(Duration::from_secs(60)),
    ];
    // The first c takes the free k2; the second is skipped, its look-up (before the batch) finding
    // k2's job done within its period.
    assert_eq!(enqueue_many(&mut conn, &again).await.unwrap(), 1);
    let period_first = vec![
        NewJob::new("e")
            .unique_key("k3")
            .unique_for(Duration::from_secs(60)),
    ];
    assert_eq!(enqueue_many(&mut conn, &period_first).await.unwrap(), 1);
    db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6) WHERE unique_key = 'k3'")
        .await;
    assert_eq!(enqueue_many(&mut conn, &period_first).await.unwrap(), 0);
    assert_eq!(rows(&db).await, 6);
}

#[tokio::test]
async fn plain_sql_keeps_the_live_job_with_insert_ignore_or_on_duplicate_key_update() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    // The README's recipes, statement for statement.
    let insert_ignore =
        "INSERT IGNORE INTO job_queue (kind, payload, unique_key) VALUES ('mail', '{}', 'order:7')";
    let first = sqlx::query(insert_ignore)
        .execute(&mut *conn)
        .await
        .unwrap();
    assert_eq!(first.rows_affected(), 1);
    let id = first.last_insert_id();
    let second = sqlx::query(insert_ignore)
        .execute(&mut *conn)
        .await
        .unwrap();
    assert_eq!(second.rows_affected(), 0, "ignored");
    let holder: u64 = sqlx::query_scalar("SELECT id FROM job_queue WHERE unique_live = 'order:7'")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(holder, id);

    let upsert = "INSERT INTO job_queue (kind, payload, unique_key) VALUES ('mail', '{}', 'order:7') \
                  ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)";
    sqlx::query(upsert).execute(&mut *conn).await.unwrap();
    let got: u64 = sqlx::query_scalar("SELECT LAST_INSERT_ID()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(got, id);
    // Without IGNORE or ON DUPLICATE KEY the server refuses the row (1062).
    let e = sqlx::query("INSERT INTO job_queue (kind, unique_key) VALUES ('mail', 'order:7')")
        .execute(&mut *conn)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Duplicate entry"), "{e}");
    assert_eq!(rows(&db).await, 1);
    // Once it is done, the same statement inserts a new job and LAST_INSERT_ID() is the new one.
    db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6)")
        .await;
    let done = sqlx::query(upsert).execute(&mut *conn).await.unwrap();
    assert_ne!(done.last_insert_id(), id);
    assert_eq!(rows(&db).await, 2);

    // The look-up uses the UNIQUE index, compared as bytes.
    let plan = sqlx::query(
        "EXPLAIN SELECT id FROM job_queue WHERE unique_live = ? AND kind = ? LOCK IN SHARE MODE",
    )
    .bind(b"order:7".as_slice())
    .bind("mail")
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let keys: Vec<Option<String>> = plan
        .iter()
        .map(|r| {
            use sqlx::Row;
            r.try_get::<Option<Vec<u8>>, _>("key")
                .unwrap()
                .map(|b| String::from_utf8(b).unwrap())
        })
        .collect();
    assert_eq!(keys, vec![Some("unique_live_kind".to_string())]);
}

#[tokio::test]
async fn bad_keys_are_refused_before_anything_is_written() {
    let db = TestDb::new().await;
    let long = "k".repeat(256);
    for (job, needle) in [
        (
            NewJob::new("x").unique_key(&long),
            "invalid unique key: is 256 bytes",
        ),
        (
            NewJob::new("x").unique_key(""),
            "invalid unique key: must not be empty",
        ),
        (
            NewJob::new("x").unique_for(Duration::from_secs(5)),
            "invalid unique_for: needs a unique key",
        ),
    ] {
        let e = enqueue_unique(&db.pool, &job)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{e}");
        let mut conn = db.pool.acquire().await.unwrap();
        let e = enqueue_many(&mut conn, &[NewJob::new("ok"), job])
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{e}");
    }
    assert!(
        put(&db, NewJob::new("x").unique_key("k".repeat(255)))
            .await
            .id()
            .0
            > 0
    );
    assert_eq!(rows(&db).await, 1);
}

/// 8 enqueuers × 50 rounds of one key while a worker claims and finishes the jobs: the UNIQUE index
/// never lets two live jobs hold the key, and every enqueue gets the id of a job that exists and has
/// the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueuers_of_one_key_never_make_two_live_jobs() {
    const ENQUEUERS: usize = 8;
    const ROUNDS: usize = 50;
    let db = TestDb::new().await;
    let pool = db.pool(ENQUEUERS as u32 + 4).await;
    let ran = Arc::new(AtomicU64::new(0));
    let handlers = {
        let ran = ran.clone();
        Handlers::new()
            .register("race", move |_job: JobContext| {
                let ran = ran.clone();
                async move {
                    ran.fetch_add(1, Ordering::Relaxed);
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
                let live: i64 = sqlx::query_scalar(&format!(
                    "SELECT COUNT(*) FROM job_queue WHERE unique_key = 'race' AND {LIVE}"
                ))
                .fetch_one(&pool)
                .await
                .unwrap();
                most = most.max(live);
                samples += 1;
            }
            (samples, most)
        })
    };
    let mut tasks = Vec::new();
    for _ in 0..ENQUEUERS {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let (mut inserted, mut existing) = (0u32, 0u32);
            for _ in 0..ROUNDS {
                let got = enqueue_unique(&pool, &NewJob::new("race").unique_key("race"))
                    .await
                    .unwrap();
                let key: Option<Vec<u8>> =
                    sqlx::query_scalar("SELECT unique_key FROM job_queue WHERE id = ?")
                        .bind(got.id())
                        .fetch_one(&pool)
                        .await
                        .unwrap_or_else(|e| panic!("job {} of {got:?}: {e}", got.id()));
                assert_eq!(key.as_deref(), Some(b"race".as_slice()));
                if got.is_existing() {
                    existing += 1;
                } else {
                    inserted += 1;
                }
                // Room for the worker to finish the holder now and then, so that enqueuers also
                // meet a key being freed, not only one long held.
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            (inserted, existing)
        }));
    }
    let (mut inserted, mut existing) = (0, 0);
    for t in tasks {
        let (i, e) = t.await.unwrap();
        inserted += i;
        existing += e;
    }
    done.store(true, Ordering::Relaxed);
    let (samples, most) = watcher.await.unwrap();
    worker.stop().await;
    assert_eq!(inserted + existing, (ENQUEUERS * ROUNDS) as u32);
    assert!(most <= 1, "{most} live jobs with one key");
    assert!(samples > 10, "watcher took {samples} samples");
    assert_eq!(rows(&db).await, i64::from(inserted), "one row per insert");
    // Both outcomes happened: the worker freed the key repeatedly, and enqueuers met a holder.
    assert!(
        inserted > 1 && existing > 0,
        "{inserted} inserted, {existing} existing"
    );
    eprintln!(
        "race: {inserted} inserted, {existing} existing, {} runs, max live {most} over {samples} samples",
        ran.load(Ordering::Relaxed)
    );
}

#[tokio::test]
async fn the_cli_says_whether_it_inserted() {
    let db = TestDb::new().await;
    let url = Some(db.url.as_str());
    let first = run_jobq(url, &["enqueue", "sync", "--unique-key", "user:7"]);
    assert!(first.status.success(), "{first:?}");
    let id = String::from_utf8_lossy(&first.stdout).trim().to_string();
    assert!(
        String::from_utf8_lossy(&first.stderr).is_empty(),
        "{first:?}"
    );
    let second = run_jobq(url, &["enqueue", "sync", "--unique-key", "user:7"]);
    assert!(second.status.success(), "{second:?}");
    assert_eq!(String::from_utf8_lossy(&second.stdout).trim(), id);
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!(
            "job {id} holds unique key \"user:7\"; nothing inserted"
        )),
        "{err}"
    );
    let json = run_jobq(
        url,
        &["enqueue", "sync", "--unique-key", "user:7", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["id"].to_string(), id);
    assert_eq!(v["existing"], serde_json::json!(true));
    let fresh = run_jobq(
        url,
        &[
            "enqueue",
            "sync",
            "--unique-key",
            "user:8",
            "--unique-for",
            "1h",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&fresh.stdout).unwrap();
    assert_eq!(v["existing"], serde_json::json!(false));
    assert_eq!(rows(&db).await, 2);

    let long = "k".repeat(300);
    for (args, needle) in [
        (
            vec!["enqueue", "sync", "--unique-key", long.as_str()],
            "invalid unique key: is 300 bytes long; the unique_key column holds at most 255",
        ),
        (
            vec!["enqueue", "sync", "--unique-key", ""],
            "invalid unique key: must not be empty",
        ),
        (
            vec!["enqueue", "sync", "--unique-for", "1h"],
            "--unique-key",
        ),
    ] {
        let out = run_jobq(url, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        if !needle.starts_with("--") {
            assert_eq!(out.status.code(), Some(1), "{args:?}");
        }
    }
    assert_eq!(rows(&db).await, 2, "nothing written");
}
