//! Global concurrency limits: many workers, many limited kinds, never more running than the limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobq::{
    Handlers, JobContext, JobError, JobLimits, Mode, Worker, WorkerConfig, admin::LimitScope,
};

use crate::common::{TestDb, TestWorker, run_jobq, wait_until};

/// Running jobs per kind, and the most seen at once, across every worker of the test.
#[derive(Default)]
struct Gauge {
    now: HashMap<String, u32>,
    most: HashMap<String, u32>,
}

fn counting_handlers(kinds: &[&str], gauge: &Arc<Mutex<Gauge>>, hold: Duration) -> Handlers {
    let mut h = Handlers::new();
    for kind in kinds {
        let gauge = gauge.clone();
        h = h
            .register(kind, move |job: JobContext| {
                let gauge = gauge.clone();
                async move {
                    {
                        let mut g = gauge.lock().unwrap();
                        let n = g.now.entry(job.kind.clone()).or_default();
                        *n += 1;
                        let n = *n;
                        let most = g.most.entry(job.kind.clone()).or_default();
                        *most = (*most).max(n);
                    }
                    tokio::time::sleep(hold).await;
                    *gauge.lock().unwrap().now.get_mut(&job.kind).unwrap() -= 1;
                    Ok::<(), JobError>(())
                }
            })
            .unwrap();
    }
    h
}

/// 16 workers drain five limited kinds and one free kind: no limited kind ever runs more jobs at once
/// than its limit, the free kind runs wide, and every job is done once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_workers_never_exceed_a_kinds_limit() {
    let db = TestDb::new().await;
    let limits = JobLimits::new(db.pool(2).await);
    let limited = ["l1", "l2", "l3", "l4", "l5"];
    for (i, k) in limited.iter().enumerate() {
        limits
            .set(LimitScope::Kind, k, 1 + i as u32 % 3, "test")
            .await
            .unwrap();
    }
    for k in limited.iter().chain(&["free"]) {
        db.exec(&format!(
            "INSERT INTO job_queue (kind) SELECT '{k}' FROM seq_1_to_60"
        ))
        .await;
    }
    let gauge = Arc::new(Mutex::new(Gauge::default()));
    let kinds: Vec<&str> = limited.iter().copied().chain(["free"]).collect();
    let deadlocks_before = deadlocks(&db).await;
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..16 {
        let handlers = counting_handlers(&kinds, &gauge, Duration::from_millis(20));
        let drain =
            |c: &mut WorkerConfig| (c.mode, c.concurrency, c.batch_size) = (Mode::Drain, 4, 4);
        workers.push(db.worker(handlers).config(drain).start().await);
    }
    let mut claim_errors = 0;
    for w in workers {
        claim_errors += w.finished().await.claim_errors;
    }
    // Drain workers may stop while a limit holds jobs back: finish what they left.
    let last = db
        .worker(counting_handlers(&kinds, &gauge, Duration::from_millis(20)))
        .start()
        .await;
    wait_until("every job done", Duration::from_secs(60), || async {
        db.states().await == "done=360"
    })
    .await;
    last.stop().await;
    let most = gauge.lock().unwrap().most.clone();
    eprintln!(
        "most running at once: {most:?}; drained in {:?}; claim errors {claim_errors}; server \
         deadlocks meanwhile (all tests): {}",
        started.elapsed(),
        deadlocks(&db).await - deadlocks_before
    );
    for (i, k) in limited.iter().enumerate() {
        assert!(most[*k] <= 1 + i as u32 % 3, "{k}: {most:?}");
    }
    assert!(
        most["free"] > 3,
        "the free kind was held back too: {most:?}"
    );
    assert_eq!(claim_errors, 0);
}

/// InnoDB's deadlock count since the server started (every database on it).
async fn deadlocks(db: &TestDb) -> i64 {
    let (_, n): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
        .fetch_one(&db.pool(1).await)
        .await
        .unwrap();
    n.parse().unwrap()
}

/// What a limit costs a claim: one worker drains no-op jobs of a kind without a limit, then as many of a
/// kind whose limit never binds, twice each. Prints both rates (a measurement, not a timed assertion).
#[tokio::test]
async fn the_claim_cost_of_a_limit_next_to_a_plain_claim() {
    let db = TestDb::new().await;
    let limits = JobLimits::new(db.pool(2).await);
    limits
        .set(LimitScope::Kind, "limited", 1000, "test")
        .await
        .unwrap();
    let jobs = 3000;
    let mut rates = Vec::new();
    // Alternated, so neither gets only the cold start or only a busier machine.
    for kind in ["plain", "limited", "plain", "limited"] {
        db.exec(&format!(
            "INSERT INTO job_queue (kind) SELECT '{kind}' FROM seq_1_to_{jobs}"
        ))
        .await;
        let handlers = Handlers::new()
            .register(kind, |_job: JobContext| async { Ok::<(), JobError>(()) })
            .unwrap();
        let worker = Worker::new(
            db.pool(4).await,
            handlers,
            WorkerConfig {
                mode: Mode::Drain,
                concurrency: 50,
                batch_size: 50,
                ..WorkerConfig::default()
            },
        )
        .unwrap();
        let t0 = Instant::now();
        let report = worker.run(jobq::CancellationToken::new()).await.unwrap();
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(report.done, jobs, "{kind}");
        rates.push((kind, jobs as f64 / secs));
    }
    eprintln!(
        "claim cost of a limit (1 worker, c=50, b=50, {jobs} no-op jobs, debug build): {}",
        rates
            .iter()
            .map(|(k, r)| format!("{k} {r:.0} jobs/s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// A limit of 0 holds a kind (other kinds run); raised to 1, its jobs run one at a time; a queue limit
/// holds every kind of the queue together.
#[tokio::test]
async fn a_zero_limit_holds_and_a_queue_limit_counts_every_kind() {
    let db = TestDb::new().await;
    let limits = JobLimits::new(db.pool(2).await);
    limits
        .set(LimitScope::Kind, "held", 0, "test")
        .await
        .unwrap();
    db.exec("INSERT INTO job_queue (kind) SELECT 'held' FROM seq_1_to_3")
        .await;
    db.exec("INSERT INTO job_queue (kind) VALUES ('other')")
        .await;
    db.exec(
        "INSERT INTO job_queue (queue, kind) SELECT 'narrow', IF(seq % 2, 'a', 'b') FROM seq_1_to_6",
    )
    .await;
    limits
        .set(LimitScope::Queue, "narrow", 1, "test")
        .await
        .unwrap();
    let gauge = Arc::new(Mutex::new(Gauge::default()));
    let handlers = counting_handlers(
        &["held", "other", "a", "b"],
        &gauge,
        Duration::from_millis(50),
    );
    let worker = db
        .worker(handlers)
        .queues(&["default", "narrow"])
        .start()
        .await;
    wait_until(
        "the free job and the narrow queue done",
        Duration::from_secs(20),
        || async {
            db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'done'")
                .await
                == 7
        },
    )
    .await;
    // It has looked for work again since, and found nothing it may claim.
    worker.settled().await;
    let held: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE kind = 'held' AND state = 'queued'")
        .await;
    assert_eq!(held, 3, "a held kind started");
    limits
        .set(LimitScope::Kind, "held", 1, "test")
        .await
        .unwrap();
    wait_until("the held jobs done", Duration::from_secs(20), || async {
        db.states().await == "done=10"
    })
    .await;
    worker.stop().await;
    let g = gauge.lock().unwrap();
    assert_eq!(g.most["held"], 1, "{:?}", g.most);
    let narrow = g.most.get("a").copied().unwrap_or(0) + g.most.get("b").copied().unwrap_or(0);
    assert!(g.most["a"] <= 1 && g.most["b"] <= 1, "{:?}", g.most);
    assert!(narrow >= 1);
}

/// Rate-limited no-op handlers for `kind`, one set per worker.
fn noop(kind: &str) -> Handlers {
    Handlers::new()
        .register(kind, |_job: JobContext| async { Ok::<(), JobError>(()) })
        .unwrap()
}

/// `workers` forever workers of `handlers()` at the defaults.
async fn start_workers(
    db: &TestDb,
    workers: usize,
    handlers: impl Fn() -> Handlers,
) -> Vec<TestWorker> {
    let mut started = Vec::new();
    for _ in 0..workers {
        started.push(db.worker(handlers()).start().await);
    }
    started
}

/// The jobs' start times in µs, in order.
async fn starts_us(db: &TestDb) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT CAST(UNIX_TIMESTAMP(started_at) * 1000000 AS SIGNED) FROM job_queue \
         ORDER BY started_at",
    )
    .fetch_all(&db.pool(1).await)
    .await
    .unwrap()
}

/// The first `n + 1` starts that lie within less than `per` of each other: a period of that length
/// holding more than `n` starts. `None` when there is none.
fn crowded(starts: &[i64], n: usize, per: Duration) -> Option<&[i64]> {
    starts
        .windows(n + 1)
        .find(|w| w[n] - w[0] < per.as_micros() as i64)
}

/// A rate limit of 5 jobs per 2 s: four workers take 15 due no-op jobs, so the last starts at least two
/// periods after the first, and no 2 s hold more than 5 starts.
#[tokio::test]
async fn a_rate_limit_spreads_starts_over_its_windows() {
    let db = TestDb::new().await;
    let limits = JobLimits::new(db.pool(2).await);
    let per = Duration::from_secs(2);
    limits
        .set_rate(LimitScope::Kind, "rated", 5, per, "test")
        .await
        .unwrap();
    db.exec("INSERT INTO job_queue (kind) SELECT 'rated' FROM seq_1_to_15")
        .await;
    let workers = start_workers(&db, 4, || noop("rated")).await;
    wait_until("every rated job done", Duration::from_secs(30), || async {
        db.states().await == "done=15"
    })
    .await;
    for w in workers {
        w.stop().await;
    }
    let starts = starts_us(&db).await;
    let spread_ms = (starts[14] - starts[0]) / 1000;
    eprintln!("15 jobs at 5 per 2 s: starts spread over {spread_ms} ms");
    assert!(spread_ms >= 3900, "{spread_ms} ms");
    assert_eq!(crowded(&starts, 5, per), None);
}

/// "4 per 2 s" holds for every 2 s, not for windows of 2 s: jobs that come due one every 250 ms, taken
/// by three workers, never start 5 within 2 s. A fixed window let the last starts of one window and
/// the first of the next (all waiting at its edge) add up to 7 within well under a period.
#[tokio::test]
async fn no_period_of_a_rate_limit_holds_more_starts_than_it_allows() {
    let db = TestDb::new().await;
    let limits = JobLimits::new(db.pool(2).await);
    let per = Duration::from_secs(2);
    limits
        .set_rate(LimitScope::Kind, "rated", 4, per, "test")
        .await
        .unwrap();
    let workers = start_workers(&db, 3, || noop("rated")).await;
    // Due from 1 s on (the workers are waiting by then), one every 250 ms: 16 jobs over four periods.
    db.exec(
        "INSERT INTO job_queue (kind, run_at) SELECT 'rated', \
         NOW(6) + INTERVAL 1000000 + seq * 250000 MICROSECOND FROM seq_0_to_15",
    )
    .await;
    wait_until("every rated job done", Duration::from_secs(40), || async {
        db.states().await == "done=16"
    })
    .await;
    for w in workers {
        w.stop().await;
    }
    let starts = starts_us(&db).await;
    let from_first: Vec<i64> = starts.iter().map(|s| (s - starts[0]) / 1000).collect();
    eprintln!("16 jobs due every 250 ms at 4 per 2 s started at (ms): {from_first:?}");
    assert_eq!(
        crowded(&starts, 4, per)
            .map(|w| w.iter().map(|s| (s - starts[0]) / 1000).collect::<Vec<_>>()),
        None,
        "5 starts within 2 s (ms from the first start)"
    );
    let left: i64 = db.scalar("SELECT COUNT(*) FROM jobq_limit_starts").await;
    assert!(
        left <= 4,
        "{left} starts recorded, more than one period holds"
    );
}

/// A limit does not change the order: a limited kind (under a limit that never binds) at priority -5
/// runs before the unlimited jobs queued before it, and at equal priority jobs run in id order, limited
/// or not. One job at a time, so the order the handlers see is the claim order.
#[tokio::test]
async fn a_limited_kind_keeps_its_place_in_the_queue() {
    let db = TestDb::new().await;
    JobLimits::new(db.pool(2).await)
        .set(LimitScope::Kind, "limited", 1000, "test")
        .await
        .unwrap();
    db.exec("INSERT INTO job_queue (kind) SELECT 'free' FROM seq_1_to_10")
        .await;
    db.exec("INSERT INTO job_queue (kind, priority) VALUES ('limited', -5)")
        .await;
    db.exec(
        "INSERT INTO job_queue (kind, priority) SELECT IF(seq % 2, 'limited', 'free'), 0 \
         FROM seq_1_to_6",
    )
    .await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut handlers = Handlers::new();
    for kind in ["free", "limited"] {
        let order = order.clone();
        handlers = handlers
            .register(kind, move |job: JobContext| {
                let order = order.clone();
                async move {
                    order.lock().unwrap().push(job.id.0);
                    Ok::<(), JobError>(())
                }
            })
            .unwrap();
    }
    let report = db
        .worker(handlers)
        .config(|c| (c.concurrency, c.batch_size) = (1, 1))
        .drain()
        .await;
    assert_eq!(report.done, 17);
    let want: Vec<u64> =
        sqlx::query_scalar("SELECT id FROM job_queue ORDER BY priority, run_at, id")
            .fetch_all(&db.pool(1).await)
            .await
            .unwrap();
    assert_eq!(*order.lock().unwrap(), want);
}

/// The CLI sets, lists and removes limits; bad input is refused with nothing written.
#[tokio::test]
async fn the_limit_commands_set_list_and_remove() {
    let db = TestDb::new().await;
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let out = run_jobq(
        Some(&db.url),
        &["limit", "set", "--kind", "email.send", "5"],
    );
    assert!(
        text(&out).contains("at most 5 jobs of kind email.send"),
        "{}",
        text(&out)
    );
    let out = run_jobq(Some(&db.url), &["limit", "set", "--queue", "reports", "0"]);
    assert!(text(&out).contains("queue reports held"), "{}", text(&out));
    let out = run_jobq(Some(&db.url), &["limit", "list", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["scope"], "kind");
    assert_eq!(json[0]["max_jobs"], 5);
    assert_eq!(json[1]["name"], "reports");
    let out = run_jobq(
        Some(&db.url),
        &["limit", "set", "--kind", "email.send", "100", "--per", "1m"],
    );
    assert!(
        text(&out).contains("at most 100 jobs of kind email.send start per 1m"),
        "{}",
        text(&out)
    );
    let out = run_jobq(Some(&db.url), &["limit", "list"]);
    assert!(text(&out).contains("per 1m"), "{}", text(&out));
    let out = run_jobq(
        Some(&db.url),
        &["limit", "remove", "--kind", "email.send", "--per", "1m"],
    );
    assert!(text(&out).contains("no longer limited"), "{}", text(&out));
    let out = run_jobq(Some(&db.url), &["limit", "remove", "--queue", "reports"]);
    assert!(text(&out).contains("no longer limited"), "{}", text(&out));
    for (args, want) in [
        (
            vec!["limit", "set", "--kind", "bad kind", "2"],
            "invalid kind",
        ),
        (
            vec!["limit", "set", "--kind", "k", "2000000"],
            "invalid limit",
        ),
    ] {
        let out = run_jobq(Some(&db.url), &args);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains(want), "{}", text(&out));
    }
    let out = run_jobq(Some(&db.url), &["limit", "set", "5"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let left: i64 = db.scalar("SELECT COUNT(*) FROM jobq_limits").await;
    assert_eq!(left, 1);
}
