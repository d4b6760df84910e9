//! Priority aging: a flood of urgent jobs starves a low-priority one without it and not with it, and
//! what it costs: nothing in the claim, and a pass that reads in proportion to the priority levels,
//! not to the backlog. The rules (floor, retry, release) and how it is shown are in `aging_rules.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jobq::{Handlers, JobContext, JobError, NewJob, Queues, Reaper, ReaperConfig};
use sqlx::{Connection, Row};
use tokio::sync::Notify;

use crate::common::{TestDb, claim_selects};

/// The flood's jobs waiting at any time, at priority 0: more than the worker runs at once.
const FLOOD: usize = 40;
/// Low-priority job's priority, and the aging step: it reaches the flood's level after 10 steps.
const LOW: i16 = 10;
const STEP: Duration = Duration::from_millis(200);
/// How long the low job is given: 10 steps (2 s) plus reaper intervals and claims, with room for a
/// loaded machine.
const WITHIN: Duration = Duration::from_secs(6);

/// What a flood run saw: how long after its enqueue the low job started (`None`: not within
/// [`WITHIN`]), and how many flood jobs ran meanwhile.
struct FloodRun {
    low_started: Option<Duration>,
    flood_ran: u64,
}

/// A constant flood of priority-0 jobs (each one enqueues its successor, so [`FLOOD`] always wait)
/// through a worker that runs two at a time, a reaper passing every 100 ms, and one job of priority
/// [`LOW`], with or without aging of the queue.
async fn flood(aging: bool) -> FloodRun {
    let db = TestDb::new().await;
    if aging {
        Queues::new(db.pool.clone())
            .age("default", STEP, None, "test")
            .await
            .unwrap();
    }
    for _ in 0..FLOOD {
        jobq::enqueue(&db.pool, &NewJob::new("flood"))
            .await
            .unwrap();
    }
    let ran = Arc::new(AtomicU64::new(0));
    let low_ran = Arc::new(Notify::new());
    let (pool, counter, notify) = (db.pool.clone(), ran.clone(), low_ran.clone());
    let handlers = Handlers::new()
        .register("flood", move |_job: JobContext| {
            let (pool, counter) = (pool.clone(), counter.clone());
            async move {
                jobq::enqueue(&pool, &NewJob::new("flood")).await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                counter.fetch_add(1, Ordering::Relaxed);
                Ok::<(), JobError>(())
            }
        })
        .unwrap()
        .register("low", move |_job: JobContext| {
            let notify = notify.clone();
            async move {
                notify.notify_one();
                Ok::<(), JobError>(())
            }
        })
        .unwrap();
    let worker = db
        .worker(handlers)
        .config(|c| (c.concurrency, c.batch_size) = (2, 2))
        .start()
        .await;
    let stop_reaper = jobq::CancellationToken::new();
    let reaper = Reaper::new(
        db.pool(2).await,
        ReaperConfig {
            interval: Duration::from_millis(100),
            ..ReaperConfig::default()
        },
    )
    .unwrap();
    let reaping = tokio::spawn(reaper.run(stop_reaper.clone()));
    worker
        .signals
        .wait_until("the flood runs", Duration::from_secs(20), |c| {
            c.claimed >= 20
        })
        .await;

    let id = jobq::enqueue(&db.pool, &NewJob::new("low").priority(LOW))
        .await
        .unwrap();
    let enqueued = Instant::now();
    let ran_before = ran.load(Ordering::Relaxed);
    let low_started = tokio::time::timeout(WITHIN, low_ran.notified())
        .await
        .ok()
        .map(|()| enqueued.elapsed());
    let flood_ran = ran.load(Ordering::Relaxed) - ran_before;
    stop_reaper.cancel();
    reaping.await.unwrap().unwrap();
    worker.stop().await;

    let job = jobq::Jobs::new(db.pool.clone()).get(id).await.unwrap();
    if aging {
        assert_eq!(
            (job.priority, job.base_priority),
            (0, Some(LOW)),
            "it ran at the flood's level, aged from its own"
        );
    } else {
        assert_eq!((job.priority, job.base_priority), (LOW, None));
    }
    FloodRun {
        low_started,
        flood_ran,
    }
}

/// The starvation test: with two jobs running at a time and a flood of urgent ones always waiting, a
/// low-priority job never runs without aging, and runs within [`WITHIN`] with one step per 200 ms.
#[tokio::test]
async fn a_flood_of_urgent_jobs_starves_a_low_one_unless_its_queue_ages() {
    let starved = flood(false).await;
    eprintln!(
        "without aging: low job started {:?}; {} flood jobs ran in the window",
        starved.low_started, starved.flood_ran
    );
    assert_eq!(
        starved.low_started, None,
        "without aging the low job must wait out the flood"
    );
    assert!(
        starved.flood_ran > 50,
        "the worker kept serving the flood meanwhile ({} jobs), so the low job was passed over",
        starved.flood_ran
    );

    let aged = flood(true).await;
    eprintln!(
        "with aging every {STEP:?}: low job started after {:?}; {} flood jobs ran before it",
        aged.low_started, aged.flood_ran
    );
    let took = aged
        .low_started
        .unwrap_or_else(|| panic!("with aging the low job must start within {WITHIN:?}"));
    assert!(
        took >= STEP * LOW as u32,
        "it cannot start before it has waited its {LOW} steps: {took:?}"
    );
}

/// `Handler_read_*` of this session, by counter.
async fn handler_reads(conn: &mut sqlx::MySqlConnection) -> Vec<(String, i64)> {
    sqlx::query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let name: String = r.get(0);
            let v: Vec<u8> = r.get(1);
            (name, String::from_utf8_lossy(&v).parse().unwrap_or(0))
        })
        .collect()
}

/// The index reads (every counter but the table scans' `rnd_next`, which SHOW STATUS itself moves)
/// that `sql`, or the aging pass when `sql` is `None`, made on `conn`, by counter.
async fn index_reads(conn: &mut sqlx::MySqlConnection, sql: Option<&str>) -> Vec<(String, i64)> {
    let before = handler_reads(conn).await;
    match sql {
        Some(sql) => {
            let mut tx = conn.begin().await.unwrap();
            sqlx::query(sql).fetch_all(&mut *tx).await.unwrap();
            tx.rollback().await.unwrap();
        }
        None => {
            jobq::testing::age_priorities(conn).await.unwrap();
        }
    }
    let after = handler_reads(conn).await;
    after
        .into_iter()
        .zip(before)
        .filter(|((name, _), _)| name != "Handler_read_rnd_next")
        .map(|((name, a), (_, b))| (name, a - b))
        .filter(|(_, n)| *n != 0)
        .collect()
}

fn total(reads: &[(String, i64)]) -> i64 {
    reads.iter().map(|(_, n)| n).sum()
}

/// Inserts `per_level` waiting jobs at each of `levels` into `queue`, due `due_ago_secs` ago.
async fn backlog(db: &TestDb, queue: &str, levels: &[i16], per_level: usize, due_ago_secs: u32) {
    for &p in levels {
        for _ in 0..per_level / 1000 {
            let values =
                vec![
                    format!("('{queue}', 'k', {p}, NOW(6) - INTERVAL {due_ago_secs} SECOND)");
                    1000
                ];
            db.exec(&format!(
                "INSERT INTO job_queue (queue, kind, priority, run_at) VALUES {}",
                values.join(",")
            ))
            .await;
        }
    }
    db.exec("ANALYZE TABLE job_queue").await;
}

/// Unused, aging costs the claim nothing: the claim's statements do not mention it, and they read the
/// same index entries whether the queue ages or not. A pass with no queue aging reads the empty
/// settings table and nothing else.
#[tokio::test]
async fn aging_changes_nothing_a_claim_reads() {
    let db = TestDb::new().await;
    backlog(&db, "q", &[0, 5, 10], 2_000, 0).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let selects = claim_selects("q", "h", &["k"], 10);
    for sql in &selects {
        assert!(
            !sql.contains("aging") && !sql.contains("base_priority"),
            "{sql}"
        );
    }
    // A session's first statement on a table also reads the table's statistics (MariaDB's
    // engine-independent statistics count as key reads): each statement runs once before it counts.
    let mut plain = Vec::new();
    for sql in &selects {
        index_reads(&mut conn, Some(sql)).await;
        plain.push(index_reads(&mut conn, Some(sql)).await);
    }
    index_reads(&mut conn, None).await;
    let idle = index_reads(&mut conn, None).await;
    assert!(
        total(&idle) <= 1,
        "a pass with no queue aging reads the empty settings table only: {idle:?}"
    );

    let queues = Queues::new(db.pool.clone());
    queues
        .age("q", Duration::from_secs(3600), None, "test")
        .await
        .unwrap();
    index_reads(&mut conn, None).await; // ages nothing: no job has waited an hour
    for (sql, plain) in selects.iter().zip(&plain) {
        assert_eq!(&index_reads(&mut conn, Some(sql)).await, plain, "{sql}");
    }
    eprintln!("the claim's pick and walk read {plain:?} with and without aging");
}

/// The pass over 50,000 waiting jobs on five levels, all due an hour ago, with one step a minute:
/// it raises the oldest 100 of each level above the most urgent one, and reads a few hundred index
/// entries for it (the levels, and a bounded range of each), not the backlog. Over jobs that have not
/// waited a step it reads a handful.
#[tokio::test]
async fn a_pass_reads_a_bounded_number_of_entries_over_a_large_backlog() {
    let db = TestDb::new().await;
    let levels = [0, 2, 4, 6, 8];
    backlog(&db, "big", &levels, 10_000, 3600).await;
    backlog(&db, "fresh", &levels, 1_000, 0).await;
    let queues = Queues::new(db.pool.clone());
    queues
        .age("big", Duration::from_secs(60), None, "test")
        .await
        .unwrap();
    queues
        .age("fresh", Duration::from_secs(60), None, "test")
        .await
        .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();

    let started = Instant::now();
    let reads = index_reads(&mut conn, None).await;
    let took = started.elapsed();
    let raised: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE base_priority IS NOT NULL")
        .await;
    eprintln!(
        "one pass over 50,000 due + 5,000 fresh jobs: raised {raised}, read {} index entries \
         {reads:?}, in {took:?}",
        total(&reads)
    );
    assert_eq!(
        raised,
        4 * 100,
        "the oldest 100 of each level below the top"
    );
    let moved: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE queue = 'big' AND priority = 0")
        .await;
    assert_eq!(moved, 10_000 + 400, "an hour is 60 steps: all the way up");
    assert!(
        total(&reads) < 2_000,
        "the pass must read the levels and a bounded range of each, not the backlog: {reads:?}"
    );

    queues.stop_aging("big").await.unwrap();
    let reads = index_reads(&mut conn, None).await;
    eprintln!(
        "one pass over 5,000 jobs that have not waited a step: read {} index entries {reads:?}",
        total(&reads)
    );
    assert!(total(&reads) < 50, "{reads:?}");
}
