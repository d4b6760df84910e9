//! The claim engine: fencing, query plans, and many claimers at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobq::testing::{ClaimedJob, claim_batch, stamp_selected};
use jobq::testing::{Finish, finish};
use jobq::{Handlers, JobContext, JobError, Mode, WorkerConfig};
use sqlx::{Connection, Row};

use crate::common::{TestDb, claim_selects, wait_until};

type Seen = Arc<Mutex<HashMap<u64, u32>>>;

/// Handlers for `kind` that count how often each job id ran.
fn counting(kind: &str, seen: &Seen) -> Handlers {
    let seen = seen.clone();
    Handlers::new()
        .register(kind, move |job: JobContext| {
            let seen = seen.clone();
            async move {
                *seen.lock().unwrap().entry(job.id.0).or_default() += 1;
                Ok::<(), JobError>(())
            }
        })
        .unwrap()
}

fn assert_each_once(seen: &Seen, n: usize) {
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), n, "distinct jobs run");
    let twice: Vec<_> = seen.iter().filter(|(_, c)| **c != 1).collect();
    assert!(twice.is_empty(), "jobs run more than once: {twice:?}");
}

#[tokio::test]
async fn a_stale_token_or_attempt_cannot_finish_a_job() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 1).await;
    let kinds = vec!["k".to_string()];

    let a = claim_batch(&db.pool, "worker-a", "default", &kinds, 10)
        .await
        .unwrap();
    assert_eq!(a.len(), 1);
    let id = a[0].id;
    assert_eq!(a[0].attempt(), 1);

    // The claim is taken away (as the reaper does) and someone else claims the job.
    db.exec(&format!(
        "UPDATE job_queue SET state = 'queued', claim = NULL WHERE id = {id}"
    ))
    .await;
    let b = claim_batch(&db.pool, "worker-b", "default", &kinds, 10)
        .await
        .unwrap();
    assert_eq!(b[0].attempt(), 2);

    // A's late finish changes nothing, whatever outcome it reports.
    for outcome in [
        Finish::Done,
        Finish::Dead { error: "x".into() },
        Finish::Release,
    ] {
        assert!(!finish(&db.pool, id, "worker-a", 1, &outcome).await.unwrap());
    }
    // Right token, stale attempt: also refused.
    assert!(
        !finish(&db.pool, id, "worker-b", 1, &Finish::Done)
            .await
            .unwrap()
    );
    let row = sqlx::query("SELECT state, claim FROM job_queue WHERE id = ?")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(row.get::<Vec<u8>, _>("state"), b"running");
    assert_eq!(row.get::<Vec<u8>, _>("claim"), b"worker-b");

    // The current holder finishes.
    assert!(
        finish(&db.pool, id, "worker-b", 2, &Finish::Done)
            .await
            .unwrap()
    );
    assert_eq!(db.states().await, "done=1");
    // And cannot finish twice.
    assert!(
        !finish(&db.pool, id, "worker-b", 2, &Finish::Done)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn claims_take_due_jobs_in_priority_order_and_only_handled_kinds() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, priority, run_at) VALUES \
         ('k', 5, NOW(6)), ('k', -1, NOW(6)), ('k', 0, NOW(6) + INTERVAL 1 HOUR), \
         ('other', -9, NOW(6)), ('k', 0, NOW(6) - INTERVAL 1 MINUTE)",
    )
    .await;
    db.exec("INSERT INTO job_queue (kind, queue) VALUES ('k', 'elsewhere')")
        .await;
    let got = claim_batch(&db.pool, "t", "default", &["k".to_string()], 10)
        .await
        .unwrap();
    let ids: Vec<u64> = got.iter().map(|j| j.id.0).collect();
    // Priority -1 first, then 0 (the due one; the future one is not due), then 5.
    assert_eq!(ids, vec![2, 5, 1]);
    assert_eq!(
        db.states().await,
        "queued=3 running=3",
        "future, other-kind and other-queue jobs stay queued"
    );
}

#[tokio::test]
async fn the_claim_reads_only_the_rows_it_takes_even_with_a_big_history() {
    let db = TestDb::new().await;
    // 20,000 finished rows and 3,000 ready ones, half of them of a kind this claimer does not handle
    // and placed first in claim order.
    db.insert_jobs("old", 20_000).await;
    db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6)")
        .await;
    db.exec(
        "INSERT INTO job_queue (kind, priority) SELECT 'unhandled', -1 FROM job_queue LIMIT 1500",
    )
    .await;
    db.insert_jobs("k", 1500).await;
    db.exec("ANALYZE TABLE job_queue").await;

    let mut conn = db.pool.acquire().await.unwrap();
    let [pick, walk] = claim_selects("default", "h", &["k"], 10);
    let plan: Vec<(String, Option<String>, String)> = sqlx::query(&format!("EXPLAIN {pick}"))
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let text = |c: &str| {
                let v: Option<Vec<u8>> = r.try_get(c).unwrap();
                v.map(|v| String::from_utf8_lossy(&v).into_owned())
            };
            (
                text("table").unwrap_or_default(),
                text("key"),
                text("Extra").unwrap_or_default(),
            )
        })
        .collect();
    // The pick reads the claim index alone (no row, no sort); the rows are then read by primary key,
    // and nothing sorts the joined rows (that would lock every picked row before the LIMIT).
    let table = |name: &str| plan.iter().find(|(t, _, _)| t == name).cloned();
    let (_, key, extra) = table("job_queue").expect("the pick reads job_queue");
    assert_eq!(key.as_deref(), Some("claim_order"), "plan: {plan:?}");
    assert!(extra.contains("Using index"), "plan: {plan:?}");
    let (_, key, _) = table("j").expect("the lock reads job_queue as j");
    assert_eq!(key.as_deref(), Some("PRIMARY"), "plan: {plan:?}");
    assert!(
        plan.iter()
            .all(|(_, _, e)| !e.contains("filesort") && !e.contains("temporary")),
        "the claim must not sort: {plan:?}"
    );
    let walk_plan = sqlx::query(&format!("EXPLAIN {walk}"))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let key: Option<Vec<u8>> = walk_plan.try_get("key").unwrap();
    let extra: Option<Vec<u8>> = walk_plan.try_get("Extra").unwrap();
    let extra = String::from_utf8_lossy(&extra.unwrap_or_default()).into_owned();
    assert_eq!(key.as_deref(), Some(&b"claim_order"[..]), "plan: {extra}");
    assert!(
        !extra.contains("filesort"),
        "the walk must not sort: {extra}"
    );

    for sql in [pick, walk] {
        let mut tx = conn.begin().await.unwrap();
        let before = handler_reads(&mut tx).await;
        let rows = sqlx::query(&sql).fetch_all(&mut *tx).await.unwrap();
        let reads = handler_reads(&mut tx).await - before;
        tx.rollback().await.unwrap();
        assert_eq!(rows.len(), 10);
        // Finished rows are outside the claim range and unhandled kinds are skipped inside the index,
        // so the count stays far below the 20,000 history rows; a scan or a sort would read them all.
        assert!(reads < 1_600, "claim read {reads} index entries: {sql}");
    }
    let got = claim_batch(&db.pool, "t", "default", &["k".to_string()], 10)
        .await
        .unwrap();
    assert!(got.iter().all(|j| &*j.kind == "k") && got.len() == 10);
}

/// A queue deep in due jobs of kinds this claimer does not run, with its own kind's jobs not yet due:
/// both claim SELECTs and the claim itself pass it without walking its due entries (the guard on
/// `due_kinds`, schema 32), and find the claimer's jobs once they are due.
#[tokio::test]
async fn a_queue_with_nothing_of_the_claims_kinds_due_is_passed_without_reading_its_entries() {
    let db = TestDb::new().await;
    db.insert_jobs("unhandled", 5_000).await;
    db.exec(
        "INSERT INTO job_queue (kind, run_at) SELECT 'k', NOW(6) + INTERVAL 1 HOUR \
         FROM job_queue LIMIT 50",
    )
    .await;
    db.exec("ANALYZE TABLE job_queue").await;
    let mut conn = db.pool.acquire().await.unwrap();
    for sql in claim_selects("default", "h", &["k", "k2"], 10) {
        let mut tx = conn.begin().await.unwrap();
        let before = entries_read(&mut tx).await;
        let rows = sqlx::query(&sql).fetch_all(&mut *tx).await.unwrap();
        let reads = entries_read(&mut tx).await - before;
        tx.rollback().await.unwrap();
        assert!(rows.is_empty());
        // Two dives (one per kind) and the counters' own reads; the claim index's due range holds 5,000.
        assert!(reads < 50, "the claim read {reads} index entries: {sql}");
    }
    let kinds = ["k".to_string(), "k2".to_string()];
    let got = claim_batch(&db.pool, "t", "default", &kinds, 10)
        .await
        .unwrap();
    assert!(got.is_empty());
    db.exec("UPDATE job_queue SET run_at = NOW(6) WHERE kind = 'k'")
        .await;
    let got = claim_batch(&db.pool, "t", "default", &kinds, 10)
        .await
        .unwrap();
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|j| &*j.kind == "k"));
}

/// Index entries the session read so far, counting those that index condition pushdown looked at and
/// rejected (they never reach `Handler_read_next`).
async fn entries_read(conn: &mut sqlx::MySqlConnection) -> i64 {
    let icp: (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Handler_icp_attempts'")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    handler_reads(conn).await + icp.1.parse::<i64>().unwrap()
}

async fn handler_reads(conn: &mut sqlx::MySqlConnection) -> i64 {
    let rows = sqlx::query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            let v: Vec<u8> = r.get(1);
            String::from_utf8_lossy(&v).parse::<i64>().unwrap_or(0)
        })
        .sum()
}

#[tokio::test]
async fn ten_thousand_jobs_through_four_concurrent_workers_each_run_exactly_once() {
    let db = TestDb::new().await;
    db.insert_jobs("count", 10_000).await;
    db.exec("ANALYZE TABLE job_queue").await;
    let seen: Seen = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..4 {
        let drain =
            |c: &mut WorkerConfig| (c.mode, c.concurrency, c.batch_size) = (Mode::Drain, 8, 8);
        workers.push(
            db.worker(counting("count", &seen))
                .config(drain)
                .start()
                .await,
        );
    }
    let mut claimed = 0;
    for w in workers {
        let report = w.finished().await;
        assert_eq!(report.lost, 0);
        assert_eq!(report.claim_errors, 0);
        claimed += report.claimed;
    }
    assert_eq!(claimed, 10_000);
    assert_each_once(&seen, 10_000);
    assert_eq!(db.states().await, "done=10000");
    let leftover: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE claim IS NOT NULL")
        .await;
    assert_eq!(leftover, 0);
}

#[tokio::test]
async fn deadlock_torture_many_claimers_and_producers_surface_no_error_and_lose_no_job() {
    let db = TestDb::new().await;
    let seen: Seen = Arc::default();
    let mut workers = Vec::new();
    for i in 0..6 {
        let worker = db.worker(counting("t", &seen)).config(|c| {
            (c.concurrency, c.batch_size) = (4 + i, 1 + i * 3);
            c.poll_interval = Duration::from_millis(20);
        });
        workers.push(worker.start().await);
    }
    const PER_PRODUCER: usize = 2_000;
    let mut producers = Vec::new();
    for p in 0..3u64 {
        let pool = db.pool(2).await;
        producers.push(tokio::spawn(async move {
            let mut left = PER_PRODUCER;
            let mut i = p;
            while left > 0 {
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let n = ((i >> 33) as usize % 50 + 1).min(left);
                let values = vec!["('t', (RAND() * 4) - 2)"; n].join(",");
                sqlx::query(&format!(
                    "INSERT INTO job_queue (kind, priority) VALUES {values}"
                ))
                .execute(&pool)
                .await
                .expect("producer insert");
                left -= n;
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    let total = 3 * PER_PRODUCER;
    wait_until("all jobs done", Duration::from_secs(120), || async {
        db.states().await == format!("done={total}")
    })
    .await;
    for w in workers {
        let r = w.stop().await;
        assert_eq!(
            (r.lost, r.claim_errors, r.dead, r.retried),
            (0, 0, 0, 0),
            "{r:?}"
        );
    }
    assert_each_once(&seen, total);
}

#[tokio::test]
async fn a_kind_with_a_trailing_space_is_never_claimed_by_the_kind_without_it() {
    let db = TestDb::new().await;
    // ascii_bin pads with spaces: 'quick ' = 'quick' in SQL, but they are different kinds.
    db.exec("INSERT INTO job_queue (kind) VALUES ('quick '), ('quick'), ('quick  ')")
        .await;
    let got = claim_batch(&db.pool, "t", "default", &["quick".to_string()], 10)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&*got[0].kind, "quick");

    // A drain worker for `quick` finishes what is due and leaves the padded rows queued, untouched.
    db.exec("INSERT INTO job_queue (kind) VALUES ('quick')")
        .await;
    let seen: Seen = Arc::default();
    let report = db.worker(counting("quick", &seen)).drain().await;
    assert_eq!(report.claimed, 1, "{report:?}");
    let padded: Vec<(u16, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT attempts, claim FROM job_queue WHERE kind LIKE 'quick %' AND state = 'queued'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(padded, vec![(0, None), (0, None)]);

    assert_eq!(db.states().await, "done=1 queued=2 running=1");
}

#[tokio::test]
async fn a_claim_keeps_only_the_rows_it_stamped_when_a_selected_row_was_taken_meanwhile() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 3).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    db.exec("INSERT INTO jobq_holdings (holder, held_ids) VALUES ('mine', '[]')")
        .await;
    // What an engine that accepts SKIP LOCKED without locking returns: the rows, and no lock on them.
    let selected: Vec<ClaimedJob> = sqlx::query_as(
        "SELECT id, queue, kind, payload, attempts, max_attempts, timeout_secs \
         FROM job_queue ORDER BY id",
    )
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    assert_eq!(selected.len(), 3);
    // Another worker claims the second row in between.
    db.exec("UPDATE job_queue SET state = 'running', claim = 'other', attempts = 1 WHERE id = 2")
        .await;
    let got = stamp_selected(&mut tx, "mine", selected).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(got.iter().map(|j| j.id.0).collect::<Vec<_>>(), vec![1, 3]);
    let rows: Vec<(u64, Vec<u8>, u16)> =
        sqlx::query_as("SELECT id, claim, attempts FROM job_queue ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![
            (1, b"mine".to_vec(), 1),
            (2, b"other".to_vec(), 1),
            (3, b"mine".to_vec(), 1)
        ],
        "the other worker's row is untouched"
    );
}

/// Queued rows that still carry a token, written by plain SQL (an application's UPDATE, a restore from
/// a backup taken mid-claim), at the head of a queue: the claim takes them, overwriting the token,
/// and the clean jobs behind them run too. Before, the claim locked such rows and stamped none, and a
/// draining worker stopped with every job behind them left queued.
#[tokio::test]
async fn queued_rows_that_carry_a_stale_claim_do_not_stall_the_queue() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, priority, state, claim, claimed_at) \
         SELECT 'count', -5, IF(seq % 2 = 0, 'queued', 'retry'), CONCAT('gone-', seq), NOW(6) \
         FROM seq_1_to_20",
    )
    .await;
    db.insert_jobs("count", 153).await;

    // One claim of the head takes the stale rows, with this claim's token.
    let got = claim_batch(&db.pool, "fresh", "default", &["count".to_string()], 5)
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|j| j.id.0).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    let tokens: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE claim = 'fresh' AND state = 'running'")
        .await;
    assert_eq!(tokens, 5);
    db.exec("UPDATE job_queue SET state = 'queued', claim = 'gone-again' WHERE claim = 'fresh'")
        .await;

    let seen: Seen = Arc::default();
    let report = db.worker(counting("count", &seen)).drain().await;
    assert_eq!(report.lost, 0);
    assert_each_once(&seen, 173);
    assert_eq!(db.states().await, "done=173");
    let leftover: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE claim IS NOT NULL")
        .await;
    assert_eq!(leftover, 0);
}

#[tokio::test]
async fn a_read_only_server_error_is_retried_on_a_fresh_connection() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 2).await;
    let pool = db.pool(1).await;
    {
        // The pool's only connection now refuses writes (error 1792), as every connection to an old
        // primary does after a failover, and goes back to the pool.
        let mut conn = pool.acquire().await.unwrap();
        sqlx::query("SET SESSION TRANSACTION READ ONLY")
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    let got = claim_batch(&pool, "t", "default", &["k".to_string()], 10)
        .await
        .expect("the claim is retried on a new connection");
    assert_eq!(got.len(), 2);
    assert_eq!(db.states().await, "running=2");
}

/// (id, attempt) of claimed jobs: what a worker carries to finish them as done.
fn pairs(jobs: &[ClaimedJob]) -> Vec<(u64, u16)> {
    jobs.iter().map(|j| (j.id.0, j.attempt())).collect()
}

#[tokio::test]
async fn a_claim_carries_done_finishes_in_its_own_statement_and_commit() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 6).await;
    let kinds = vec!["k".to_string()];
    let first = claim_batch(&db.pool, "w", "default", &kinds, 3)
        .await
        .unwrap();
    let (next, carried) =
        jobq::testing::claim_batch_carrying(&db.pool, "w", "default", &kinds, 2, &pairs(&first))
            .await
            .unwrap();
    assert!(carried);
    assert_eq!(next.len(), 2);
    assert_eq!(db.states().await, "done=3 queued=1 running=2");
    // One statement finished the first three and stamped the next two: one NOW(6) for all five.
    let instants: i64 = db
        .scalar(
            "SELECT COUNT(DISTINCT IF(state = 'done', finished_at, claimed_at)) FROM job_queue \
             WHERE state IN ('done', 'running')",
        )
        .await;
    assert_eq!(instants, 1);
    let leftover: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE state = 'done' AND (claim IS NOT NULL OR finished_at IS NULL)")
        .await;
    assert_eq!(
        leftover, 0,
        "done rows hold no token and have a finish time"
    );
    let stamped: i64 = db
        .scalar(
            "SELECT COUNT(*) FROM job_queue WHERE state = 'running' AND claim = 'w' AND attempts = 1 \
             AND finished_at IS NULL AND started_at IS NOT NULL",
        )
        .await;
    assert_eq!(stamped, 2);

    // Nothing due: the finishes are still made and committed.
    let (last, carried) =
        jobq::testing::claim_batch_carrying(&db.pool, "w", "other-queue", &kinds, 5, &pairs(&next))
            .await
            .unwrap();
    assert!(carried && last.is_empty());
    assert_eq!(db.states().await, "done=5 queued=1");
}

#[tokio::test]
async fn carried_finishes_whose_fence_fails_are_all_left_out_and_the_claim_still_happens() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 4).await;
    let kinds = vec!["k".to_string()];
    let mine = claim_batch(&db.pool, "w", "default", &kinds, 2)
        .await
        .unwrap();
    // The first is taken away (as a reaper does) and claimed by another worker: attempt 2 under "x".
    let taken = mine[0].id.0;
    db.exec(&format!(
        "UPDATE job_queue SET state = 'queued', claim = NULL, priority = -1 WHERE id = {taken}"
    ))
    .await;
    let theirs = claim_batch(&db.pool, "x", "default", &kinds, 1)
        .await
        .unwrap();
    assert_eq!((theirs[0].id.0, theirs[0].attempt()), (taken, 2));

    let (got, carried) =
        jobq::testing::claim_batch_carrying(&db.pool, "w", "default", &kinds, 2, &pairs(&mine))
            .await
            .unwrap();
    assert!(
        !carried,
        "one fence failed: the caller must redo them exactly"
    );
    assert_eq!(got.len(), 2, "the claim is made without them");
    let row = |id: u64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (Vec<u8>, Option<Vec<u8>>, u16)>(
                "SELECT state, claim, attempts FROM job_queue WHERE id = ?",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(
        row(taken).await,
        (b"running".to_vec(), Some(b"x".to_vec()), 2),
        "the other worker's row is untouched"
    );
    assert_eq!(
        row(mine[1].id.0).await,
        (b"running".to_vec(), Some(b"w".to_vec()), 1),
        "not finished either: the whole carry was left out"
    );
    assert_eq!(db.states().await, "running=4");
}

/// The carrying stamp and the batched finish find their rows by primary key, with a whole carry and
/// with a carry of one pair: sent alone, one pair made MariaDB 10.11 scan the whole table, so the
/// library sends it twice ([`jobq::statements::MIN_PAIRS`]), and this checks that form.
#[tokio::test]
async fn the_carrying_stamp_reads_only_the_rows_it_names() {
    use jobq::statements::{
        CLAIM_STAMP_CARRYING, CLAIM_STAMP_CARRYING_LISTING, FINISH_DONE_BATCH, MIN_PAIRS,
    };
    let db = TestDb::new().await;
    db.insert_jobs("old", 20_000).await;
    db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6)")
        .await;
    db.insert_jobs("k", 3_000).await;
    db.exec("ANALYZE TABLE job_queue").await;
    let kinds = vec!["k".to_string()];
    let first = claim_batch(&db.pool, "w", "default", &kinds, 100)
        .await
        .unwrap();
    let next: Vec<u64> =
        sqlx::query_scalar("SELECT id FROM job_queue WHERE state = 'queued' ORDER BY id LIMIT 100")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let ids = next
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    for carried in [100, 1] {
        let mut carry = pairs(&first[..carried]);
        while carry.len() < MIN_PAIRS {
            carry.push(carry[0]);
        }
        let pair_list = carry
            .iter()
            .map(|(id, a)| format!("({id}, {a})"))
            .collect::<Vec<_>>()
            .join(", ");
        // The stamp of a large claim, and of a small one, which writes the holdings list too.
        let listed = CLAIM_STAMP_CARRYING_LISTING.sql(&[
            "'w'",
            "FALSE",
            &format!("'[{}]'", ids.replace(' ', "")),
            "'w'",
            "'w'",
            &pair_list,
            &ids,
        ]);
        let stamps = [
            (
                CLAIM_STAMP_CARRYING.sql(&["'w'", "'w'", &pair_list, &ids]),
                0,
            ),
            (listed, 1),
        ];
        let finish = FINISH_DONE_BATCH.sql(&["'w'", &pair_list]);
        let mut conn = db.pool.acquire().await.unwrap();
        for sql in stamps.iter().map(|(sql, _)| sql).chain([&finish]) {
            // A joined stamp's plan has a row for the holdings row too: job_queue's is checked.
            let plans = sqlx::query(&jobq::statements::explain(sql))
                .fetch_all(&mut *conn)
                .await
                .unwrap();
            let plan = plans
                .iter()
                .find(|p| p.try_get::<Vec<u8>, _>("table").unwrap() == b"job_queue")
                .expect("a plan for job_queue");
            let key: Option<Vec<u8>> = plan.try_get("key").unwrap();
            let access: Option<Vec<u8>> = plan.try_get("type").unwrap();
            assert_eq!(
                (key.as_deref(), access.as_deref()),
                (Some(&b"PRIMARY"[..]), Some(&b"range"[..])),
                "carrying {carried}: {sql}"
            );
        }
        for (stamp, holdings_row) in &stamps {
            let mut tx = conn.begin().await.unwrap();
            let before = handler_reads(&mut tx).await;
            let changed = sqlx::query(stamp)
                .execute(&mut *tx)
                .await
                .unwrap()
                .rows_affected();
            let reads = handler_reads(&mut tx).await - before;
            assert_eq!(changed, (carried + next.len() + holdings_row) as u64);
            // Point reads of the named rows (a joined stamp reads each once more by position: the
            // server updates the holdings row first, so job_queue's changes wait in a temporary
            // table); a walk of the history or of the queued rows would read thousands.
            assert!(
                reads <= 700,
                "carrying {carried}: the carrying stamp read {reads} index entries: {stamp}"
            );
            tx.rollback().await.unwrap();
        }
    }
}

/// The finisher makes what is pending as soon as it is free, and a claim carries what arrived while
/// the finisher's statement was under way: on an idle server most rows go the first way, on a busy one
/// more the second. Either way each row is finished once, by the attempt that ran it.
#[tokio::test]
async fn a_worker_on_a_deep_queue_of_short_jobs_finishes_each_once_beside_or_with_its_claims() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 300).await;
    let seen: Seen = Arc::default();
    let report = db
        .worker(counting("k", &seen))
        .pool(db.pool.clone())
        .drain()
        .await;
    assert_eq!((report.done, report.lost), (300, 0));
    assert_each_once(&seen, 300);
    let finished: i64 = db
        .scalar(
            "SELECT COUNT(*) FROM job_queue WHERE state = 'done' AND attempts = 1 AND claim IS NULL \
             AND finished_at >= claimed_at",
        )
        .await;
    assert_eq!(finished, 300);
}

/// A row whose payload is not valid JSON, written past the CHECK (here a session with
/// `check_constraint_checks = 0`), made MariaDB refuse every UPDATE of it with the check on, the
/// claim's stamp included, and with it the rest of the claim: such rows at the head of their queues
/// stalled both, and the draining worker stopped with the error. They are set aside as dead without
/// running (payload kept, the reason in `last_error`), the job that waits for one is settled as for
/// any dead job (cancelled), and every other job runs once, in the plain claim and in the claim under
/// a limit.
#[tokio::test]
async fn rows_whose_payload_is_not_json_are_set_aside_and_their_queues_run_on() {
    let db = TestDb::new().await;
    let mut app = db.unchecked_conn().await;
    // A job waits for the first one, written as `NewJob::after` writes it (whose own UPDATE of the
    // row it waits for the server refuses now).
    let plain: u64 = sqlx::query(
        "INSERT INTO job_queue (kind, payload, priority, has_dependents) VALUES ('k', '{oops', -1, 1)",
    )
    .execute(&mut app)
    .await
    .unwrap()
    .last_insert_id();
    let waiting: u64 = sqlx::query("INSERT INTO job_queue (kind, state) VALUES ('k', 'waiting')")
        .execute(&mut app)
        .await
        .unwrap()
        .last_insert_id();
    sqlx::query("INSERT INTO jobq_job_deps (job_id, after_id) VALUES (?, ?)")
        .bind(waiting)
        .bind(plain)
        .execute(&mut app)
        .await
        .unwrap();
    let limited: u64 = sqlx::query(
        "INSERT INTO job_queue (queue, kind, payload, priority) VALUES ('lq', 'limited', 'not json', -1)",
    )
    .execute(&mut app)
    .await
    .unwrap()
    .last_insert_id();
    app.close().await.unwrap();
    db.exec("INSERT INTO job_queue (kind) SELECT 'k' FROM seq_1_to_20")
        .await;
    db.exec("INSERT INTO job_queue (queue, kind) SELECT 'lq', 'limited' FROM seq_1_to_5")
        .await;
    jobq::JobLimits::new(db.pool(2).await)
        .set(jobq::admin::LimitScope::Kind, "limited", 100, "test")
        .await
        .unwrap();

    let seen: Seen = Arc::default();
    let handlers = ["k", "limited"].iter().fold(Handlers::new(), |h, kind| {
        let seen = seen.clone();
        h.register(kind, move |job: JobContext| {
            let seen = seen.clone();
            async move {
                *seen.lock().unwrap().entry(job.id.0).or_default() += 1;
                Ok::<(), JobError>(())
            }
        })
        .unwrap()
    });
    // Before, the draining worker stopped with error 4025 at its first claim.
    db.worker(handlers).queues(&["default", "lq"]).drain().await;
    assert_each_once(&seen, 25);

    for id in [plain, limited] {
        let (state, attempts, error): (String, u16, String) = sqlx::query_as(
            "SELECT CAST(state AS CHAR), attempts, last_error FROM job_queue WHERE id = ?",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!((state.as_str(), attempts), ("dead", 0), "job {id}");
        assert!(error.contains("not valid JSON"), "job {id}: {error}");
    }
    let payloads: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(payload AS CHAR) FROM job_queue WHERE id IN (?, ?) ORDER BY id",
    )
    .bind(plain)
    .bind(limited)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(payloads, ["{oops", "not json"], "payloads kept as written");
    let dependent: String =
        sqlx::query_scalar("SELECT CAST(state AS CHAR) FROM job_queue WHERE id = ?")
            .bind(waiting)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(dependent, "cancelled");
}

/// A job whose payload was made invalid while it ran (written past MariaDB's check) finishes as any
/// other: the finish writes none of the payload and runs with the checks off
/// (`jobq::statements`, `unchecked`). Before, MariaDB checked the payload on the finish too and
/// refused it with error 4025, and the row stayed `running` under a live worker.
#[tokio::test]
async fn a_job_whose_payload_is_made_invalid_while_it_runs_still_finishes() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 5).await;
    let url = db.url.clone();
    let seen: Seen = Arc::default();
    let runs = seen.clone();
    let handlers = Handlers::new()
        .register("k", move |job: JobContext| {
            let (url, runs) = (url.clone(), runs.clone());
            async move {
                *runs.lock().unwrap().entry(job.id.0).or_default() += 1;
                let mut app = sqlx::MySqlConnection::connect(&url).await.unwrap();
                sqlx::query(
                    "SET STATEMENT check_constraint_checks = 0 FOR \
                     UPDATE job_queue SET payload = '{oops' WHERE id = ?",
                )
                .bind(job.id.0)
                .execute(&mut app)
                .await
                .unwrap();
                Ok::<(), JobError>(())
            }
        })
        .unwrap();
    db.worker(handlers).drain().await;
    assert_each_once(&seen, 5);
    assert_eq!(db.states().await, "done=5");
    let invalid: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE NOT JSON_VALID(payload)")
        .await;
    assert_eq!(invalid, 5);
}

/// The other writes to a running row (output and progress, from the library and from SQL, and the
/// application's own finish, `jobq_finish`) skip the payload's check as the worker's finishes do
/// (schemas 35 to 37 for the procedures): a payload made invalid while the job ran stops none of them.
/// Before, each failed with error 4025, and the job was retried until it died.
#[tokio::test]
async fn reports_and_the_applications_finish_count_when_the_payload_was_made_invalid() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 3).await;
    let pool = db.pool(4).await;
    let handlers = Handlers::new()
        .register("k", move |job: JobContext| {
            let pool = pool.clone();
            async move {
                let mut conn = pool.acquire().await.unwrap();
                sqlx::query(
                    "SET STATEMENT check_constraint_checks = 0 FOR \
                     UPDATE job_queue SET payload = '{oops' WHERE id = ?",
                )
                .bind(job.id.0)
                .execute(&mut *conn)
                .await
                .unwrap();
                job.output(&serde_json::json!({ "from": "library" }))
                    .await?;
                let call = |sql: &'static str| {
                    sqlx::query_scalar::<_, i64>(sql)
                        .bind(job.id.0)
                        .bind(job.claim.clone())
                        .bind(job.attempt)
                };
                let reported = call("CALL jobq_progress(?, ?, ?, 50, 'half')")
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                let recorded = call(r#"CALL jobq_output(?, ?, ?, '{"from": "sql"}')"#)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                let mut tx = conn.begin().await.unwrap();
                let finished = call("CALL jobq_finish(?, ?, ?)")
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                assert_eq!((reported, recorded, finished), (1, 1, 1));
                job.finished_by_application();
                Ok::<(), JobError>(())
            }
        })
        .unwrap();
    db.worker(handlers).drain().await;
    assert_eq!(db.states().await, "done=3");
    let reported: i64 = db
        .scalar(
            "SELECT COUNT(*) FROM job_queue WHERE progress = 50 AND output = '{\"from\": \"sql\"}' \
             AND attempts = 1 AND NOT JSON_VALID(payload)",
        )
        .await;
    assert_eq!(reported, 3);
}
