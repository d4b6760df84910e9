//! The schema: what a plain INSERT gets, what the server refuses, time zones, migrations, enqueue.

use jobq::{Error, NewJob};
use jobq::{ensure_migrated, migrate, schema::latest_version};
use sqlx::{Executor, Row};

use crate::common::TestDb;

#[tokio::test]
async fn a_plain_insert_of_only_the_kind_is_a_complete_job() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (kind) VALUES ('resize')")
        .await;
    let row = sqlx::query(
        "SELECT queue, payload, priority, state, attempts, max_attempts, timeout_secs, claim, \
         TIMESTAMPDIFF(SECOND, run_at, NOW(6)) AS age, created_at IS NOT NULL AS created \
         FROM job_queue",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(row.get::<Vec<u8>, _>("queue"), b"default");
    assert_eq!(row.get::<Vec<u8>, _>("payload"), b"{}");
    assert_eq!(row.get::<i16, _>("priority"), 0);
    assert_eq!(row.get::<Vec<u8>, _>("state"), b"queued");
    assert_eq!(row.get::<u16, _>("attempts"), 0);
    assert_eq!(
        row.get::<Option<u16>, _>("max_attempts"),
        None,
        "the handler's, else 20"
    );
    assert_eq!(row.get::<Option<u32>, _>("timeout_secs"), None);
    assert_eq!(row.get::<Option<Vec<u8>>, _>("claim"), None);
    assert!(row.get::<i64, _>("age").abs() <= 1);
    assert_eq!(row.get::<i64, _>("created"), 1);
}

#[tokio::test]
async fn the_server_refuses_malformed_rows() {
    let db = TestDb::new().await;
    for (sql, why) in [
        (
            "INSERT INTO job_queue (kind, payload) VALUES ('k', '{oops')",
            "bad JSON",
        ),
        (
            "INSERT INTO job_queue (kind, state) VALUES ('k', 'finished')",
            "unknown state",
        ),
        ("INSERT INTO job_queue (payload) VALUES ('{}')", "no kind"),
        (
            "INSERT INTO job_queue (kind, queue) VALUES ('k', NULL)",
            "NULL queue",
        ),
    ] {
        let r = db.pool.execute(sql).await;
        assert!(r.is_err(), "{why} was accepted: {sql}");
    }
    assert_eq!(db.states().await, "");
}

#[tokio::test]
async fn run_at_is_an_instant_whatever_the_inserting_sessions_time_zone() {
    let db = TestDb::new().await;
    let mut app = db.pool.acquire().await.unwrap();
    // An application whose session runs at UTC+9 (or UTC-8) inserts with the default run_at and with
    // "30 minutes from now" in its own local time.
    for tz in ["+09:00", "-08:00"] {
        app.execute(format!("SET time_zone = '{tz}'").as_str())
            .await
            .unwrap();
        app.execute(
            "INSERT INTO job_queue (kind) VALUES ('now'); \
             INSERT INTO job_queue (kind, run_at) VALUES ('later', NOW(6) + INTERVAL 30 MINUTE)",
        )
        .await
        .unwrap();
    }
    let due = jobq::testing::claim_batch(
        &db.pool,
        "t",
        "default",
        &["now".to_string(), "later".to_string()],
        10,
    )
    .await
    .unwrap();
    let kinds: Vec<&str> = due.iter().map(|j| &*j.kind).collect();
    assert_eq!(
        kinds,
        vec!["now", "now"],
        "only the jobs due now are claimed"
    );
    let ddl: String = sqlx::query("SHOW CREATE TABLE job_queue")
        .fetch_one(&db.pool)
        .await
        .map(|r| String::from_utf8_lossy(&r.get::<Vec<u8>, _>(1)).into_owned())
        .unwrap();
    assert!(
        !ddl.to_lowercase().contains("on update"),
        "no TIMESTAMP column may update itself: {ddl}"
    );
}

#[tokio::test]
async fn migrate_is_idempotent_and_safe_to_run_concurrently() {
    let db = TestDb::unmigrated().await;
    match ensure_migrated(&db.pool).await {
        Err(Error::NotMigrated {
            found: None, need, ..
        }) => assert_eq!(need, latest_version()),
        other => panic!("expected NotMigrated, got {other:?}"),
    }
    let mut runs = Vec::new();
    for _ in 0..4 {
        let pool = db.pool(2).await;
        runs.push(tokio::spawn(async move { migrate(&pool).await }));
    }
    let mut applied = 0;
    for r in runs {
        let report = r.await.unwrap().unwrap();
        assert_eq!(report.version, latest_version());
        applied += report.applied.len();
    }
    assert_eq!(
        applied as i64,
        migration_count(),
        "each migration applied once"
    );
    let rows: i64 = db
        .scalar("SELECT COUNT(*) FROM jobq_schema_migrations")
        .await;
    assert_eq!(rows, migration_count());
    ensure_migrated(&db.pool).await.unwrap();
    assert!(migrate(&db.pool).await.unwrap().applied.is_empty());

    db.exec("INSERT INTO jobq_schema_migrations (version, name) VALUES (999, 'future')")
        .await;
    let e = ensure_migrated(&db.pool).await.unwrap_err().to_string();
    assert!(e.contains("999") && e.contains("upgrade jobq"), "{e}");
}

#[tokio::test]
async fn enqueue_joins_the_callers_transaction() {
    let db = TestDb::new().await;
    let job = NewJob::new("mail")
        .payload(&serde_json::json!({"to": "ada@example.com", "emoji": "✉️"}))
        .unwrap()
        .queue("mail")
        .priority(-2)
        .max_attempts(3);

    let mut tx = db.pool.begin().await.unwrap();
    jobq::enqueue(&mut *tx, &job).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.states().await, "", "a rolled-back enqueue leaves no job");

    let mut tx = db.pool.begin().await.unwrap();
    let id = jobq::enqueue(&mut *tx, &job).await.unwrap();
    tx.commit().await.unwrap();
    let rec = jobq::testing::get_job(&db.pool, id).await.unwrap();
    assert_eq!(
        (rec.queue.as_str(), rec.priority, rec.max_attempts),
        ("mail", -2, Some(3))
    );
    let payload: serde_json::Value = serde_json::from_str(&rec.payload).unwrap();
    assert_eq!(payload["emoji"], "✉️");

    let many: Vec<NewJob> = (0..2500)
        .map(|i| NewJob::new("bulk").payload(&i).unwrap())
        .collect();
    let mut conn = db.pool.acquire().await.unwrap();
    assert_eq!(jobq::enqueue_many(&mut conn, &many).await.unwrap(), 2500);
    let n: i64 = db
        .scalar("SELECT COUNT(DISTINCT payload) FROM job_queue WHERE kind = 'bulk'")
        .await;
    assert_eq!(n, 2500);

    // A batch where only some rows set a column: the others get the column's default.
    let mixed = vec![
        NewJob::new("mixed").queue("q1").max_attempts(2),
        NewJob::new("mixed"),
        NewJob::new("mixed")
            .priority(-7)
            .run_in(std::time::Duration::from_secs(3600)),
    ];
    assert_eq!(jobq::enqueue_many(&mut conn, &mixed).await.unwrap(), 3);
    let rows: Vec<(Vec<u8>, i16, Option<u16>, i64)> = sqlx::query_as(
        "SELECT queue, priority, max_attempts, TIMESTAMPDIFF(MINUTE, NOW(6), run_at) \
         FROM job_queue WHERE kind = 'mixed' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows[0], (b"q1".to_vec(), 0, Some(2), 0));
    assert_eq!(rows[1], (b"default".to_vec(), 0, None, 0));
    assert_eq!((rows[2].1, rows[2].2), (-7, None));
    assert!((59..=60).contains(&rows[2].3), "{rows:?}");

    let e = jobq::enqueue(&db.pool, &NewJob::new("bad kind"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("bad kind"), "{e}");
}

#[tokio::test]
async fn prune_deletes_old_finished_jobs_in_batches_and_keeps_the_rest() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 2600).await;
    db.exec(
        "UPDATE job_queue SET state = ELT(1 + id % 3, 'done', 'dead', 'cancelled'), \
         finished_at = NOW(6) - INTERVAL 8 DAY WHERE id <= 2500",
    )
    .await;
    db.exec(
        "UPDATE job_queue SET state = 'done', finished_at = NOW(6) - INTERVAL 1 DAY \
         WHERE id > 2500 AND id <= 2550",
    )
    .await;
    db.exec(
        "INSERT INTO jobq_schedule_runs (schedule_id, planned_at, outcome, finished_at) VALUES \
         (1, NOW(6) - INTERVAL 9 DAY, 'done', NOW(6) - INTERVAL 9 DAY), \
         (1, NOW(6) - INTERVAL 1 DAY, 'dead', NOW(6) - INTERVAL 1 DAY), \
         (2, NOW(6) - INTERVAL 9 DAY, NULL, NULL)",
    )
    .await;
    let n = jobq::Jobs::new(db.pool.clone())
        .prune(jobq::ReaperConfig::DEFAULT_RETENTION)
        .await
        .unwrap();
    assert_eq!(n, 2500);
    assert_eq!(db.states().await, "done=50 queued=50");
    let runs: i64 = db.scalar("SELECT COUNT(*) FROM jobq_schedule_runs").await;
    assert_eq!(
        runs, 2,
        "the ended run past the retention is pruned; recent and open runs stay"
    );
}

/// Done rows have no index of their own: pruning walks the primary key from its start, a stretch of
/// ids at a time, as far as rows created before the cutoff go, and deletes the done rows among them
/// that finished before it, however far apart their ids are; live rows on the way stay.
#[tokio::test]
async fn prune_walks_the_primary_key_as_far_as_rows_created_before_the_cutoff() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (id, kind, state, created_at, finished_at, run_at) VALUES \
         (1, 'k', 'done', NOW(6) - INTERVAL 10 DAY, NOW(6) - INTERVAL 9 DAY, NOW(6) - INTERVAL 10 DAY), \
         (30000, 'k', 'queued', NOW(6) - INTERVAL 10 DAY, NULL, NOW(6) + INTERVAL 1 DAY), \
         (50000, 'k', 'done', NOW(6) - INTERVAL 9 DAY, NOW(6) - INTERVAL 8 DAY, NOW(6) - INTERVAL 9 DAY), \
         (90000, 'k', 'done', NOW(6) - INTERVAL 8 DAY, NOW(6) - INTERVAL 1 DAY, NOW(6) - INTERVAL 8 DAY), \
         (120000, 'k', 'done', NOW(6) - INTERVAL 1 HOUR, NOW(6), NOW(6) - INTERVAL 1 HOUR)",
    )
    .await;
    let n = jobq::Jobs::new(db.pool.clone())
        .prune(jobq::ReaperConfig::DEFAULT_RETENTION)
        .await
        .unwrap();
    assert_eq!(n, 2);
    let left: Vec<u64> = sqlx::query_scalar("SELECT id FROM job_queue ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, [30000, 90000, 120000]);
}

/// The `rare_state` index (schema 39) holds the rows off a job's common path and only those: a job
/// that succeeds keys (NULL, NULL) there throughout (its entry never moves: see the next test), a failed
/// job waiting for its retry has a key of its own, and so do dead, cancelled and waiting jobs, where
/// pruning, the dashboard and the dependency sweep find them.
#[tokio::test]
async fn only_rows_off_the_common_path_are_in_the_rare_state_index() {
    let db = TestDb::new().await;
    db.insert_jobs("ok", 20).await;
    db.exec("INSERT INTO job_queue (kind, max_attempts) VALUES ('fails', 1), ('fails', 2)")
        .await;
    db.exec(
        "INSERT INTO job_queue (kind, state) VALUES ('later', 'waiting'), ('gone', 'cancelled')",
    )
    .await;
    let handlers = jobq::Handlers::new()
        .register("ok", |_j: jobq::JobContext| async { Ok(()) })
        .unwrap()
        .register("fails", |_j: jobq::JobContext| async {
            Err::<(), _>(jobq::JobError::retry("not today"))
        })
        .unwrap();
    db.worker(handlers).drain().await;
    let indexed: Vec<(String, i64)> = sqlx::query_as(
        "SELECT CAST(rare_state AS CHAR), COUNT(*) FROM job_queue FORCE INDEX (rare_state) \
         WHERE rare_state IS NOT NULL GROUP BY rare_state ORDER BY rare_state",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let indexed: Vec<(&str, i64)> = indexed.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    assert_eq!(
        indexed,
        [("cancelled", 1), ("dead", 1), ("retry", 1), ("waiting", 1)]
    );
    assert_eq!(
        db.states().await,
        "cancelled=1 dead=1 done=20 retry=1 waiting=1"
    );
}

/// A job that runs and succeeds moves entries in the claim indexes only (`claim_order` and `due_kinds`,
/// which it leaves when claimed): in every other index of `job_queue` its key is the same queued,
/// running and done, so neither its claim nor its finish writes an entry there. Schema 39's `rare_state
/// (rare_state, finished_at)` broke this unseen (the done finish moved (NULL, NULL) to (NULL,
/// finished_at) for every job: about a sixth of a drain's server CPU) until schema 42.
#[tokio::test]
async fn a_job_that_succeeds_moves_no_index_entry_but_the_claim_indexes() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    let db = TestDb::new().await;
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(INDEX_NAME AS CHAR), \
         CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS CHAR) \
         FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME = 'job_queue' AND INDEX_NAME NOT IN ('PRIMARY', 'claim_order', 'due_kinds') \
         GROUP BY INDEX_NAME ORDER BY INDEX_NAME",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        indexes.iter().any(|(name, _)| name == "rare_state") && indexes.len() >= 6,
        "{indexes:?}"
    );
    // Each index's key of one row, as text: `name=(HEX(col),…)`.
    let key = indexes
        .iter()
        .map(|(name, cols)| {
            let cols: Vec<String> = cols
                .split(',')
                .map(|c| format!("IFNULL(HEX({c}), 'NULL')"))
                .collect();
            format!("'{name}=(', CONCAT_WS(',', {}), ') '", cols.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ");
    let keys_sql = format!("SELECT id, CONCAT({key}) FROM job_queue");
    let key_of_sql = format!("SELECT CONCAT({key}) FROM job_queue WHERE id = ?");
    let keys = |pool: sqlx::MySqlPool, sql: String| async move {
        sqlx::query_as::<_, (u64, String)>(&sql)
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect::<HashMap<u64, String>>()
    };
    db.insert_jobs("ok", 20).await;
    db.exec("INSERT INTO job_queue (kind, queue, priority, payload) VALUES ('ok', 'q2', 5, '{\"a\": 1}')")
        .await;
    let queued = keys(db.pool.clone(), keys_sql.clone()).await;
    assert_eq!(queued.len(), 21);
    // Each job reads its own row's keys while it runs (its claim committed before its handler starts).
    let running = Arc::new(Mutex::new(HashMap::new()));
    let (pool, seen) = (db.pool.clone(), running.clone());
    let handlers = jobq::Handlers::new()
        .register("ok", move |j: jobq::JobContext| {
            let (pool, sql, seen) = (pool.clone(), key_of_sql.clone(), seen.clone());
            async move {
                let k: String = sqlx::query_scalar(&sql)
                    .bind(j.id.0)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                seen.lock().unwrap().insert(j.id.0, k);
                Ok(())
            }
        })
        .unwrap();
    db.worker(handlers).queues(&["default", "q2"]).drain().await;
    assert_eq!(db.states().await, "done=21");
    let done = keys(db.pool.clone(), keys_sql).await;
    let running = running.lock().unwrap().clone();
    for (id, k) in &queued {
        assert_eq!(running.get(id), Some(k), "job {id}: queued, then running");
        assert_eq!(done.get(id), Some(k), "job {id}: queued, then done");
    }
}

/// How many migrations there are (the files of `migrations/`): the rows a migrated database has in
/// `jobq_schema_migrations`. Not the latest version: versions increase but may skip a number.
pub fn migration_count() -> i64 {
    std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations"))
        .expect("migrations/")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
        })
        .count() as i64
}
