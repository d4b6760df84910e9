//! Ordered keys and fair shares (schemas 27 and 28): jobs that share a key run one at a time in the
//! order they were enqueued (or at most N at once), other keys beside them and taking turns with them;
//! through retries, dead jobs (going on, or halting), an operator's retry, a SIGKILLed worker, plain SQL
//! and the CLI.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobq::{Handlers, JobContext, JobError, NewJob, State};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{
    TestDb, jobq, run_jobq, scratch_dir, spawn_forever_worker, wait_output, wait_until,
    write_config,
};
use crate::history::{self, At, Expectations, History, assert_clean, sole_worker_token};

fn ordered(key: &str, seq: u64) -> NewJob {
    NewJob::new("post")
        .order_key(key)
        .payload(&serde_json::json!({ "key": key, "seq": seq }))
        .unwrap()
}

async fn state(db: &TestDb, id: jobq::JobId) -> State {
    jobq::Jobs::new(db.pool.clone())
        .get(id)
        .await
        .unwrap()
        .state
}

/// What the handlers saw: per key, the sequence numbers in the order they started, and the most jobs
/// of one key and of all keys that ran at once.
#[derive(Debug, Default)]
struct Seen {
    started: Mutex<BTreeMap<String, Vec<u64>>>,
    /// The keys in the order their jobs started.
    order: Mutex<Vec<String>>,
    running: Mutex<HashMap<String, usize>>,
    most_per_key: AtomicUsize,
    all: AtomicUsize,
    most_all: AtomicUsize,
}

impl Seen {
    fn handlers(
        self: &Arc<Self>,
        fail: impl Fn(u64, u16) -> Option<JobError> + Send + Sync + 'static,
    ) -> Handlers {
        let (seen, fail) = (self.clone(), Arc::new(fail));
        Handlers::new()
            .register("post", move |job: JobContext| {
                let (seen, fail) = (seen.clone(), fail.clone());
                async move {
                    let p: serde_json::Value = job.payload()?;
                    let key = p["key"].as_str().unwrap().to_string();
                    let seq = p["seq"].as_u64().unwrap();
                    {
                        let mut running = seen.running.lock().unwrap();
                        let n = running.entry(key.clone()).or_default();
                        *n += 1;
                        seen.most_per_key.fetch_max(*n, Ordering::SeqCst);
                    }
                    let all = seen.all.fetch_add(1, Ordering::SeqCst) + 1;
                    seen.most_all.fetch_max(all, Ordering::SeqCst);
                    seen.started
                        .lock()
                        .unwrap()
                        .entry(key.clone())
                        .or_default()
                        .push(seq);
                    seen.order.lock().unwrap().push(key.clone());
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    seen.all.fetch_sub(1, Ordering::SeqCst);
                    *seen.running.lock().unwrap().get_mut(&key).unwrap() -= 1;
                    match fail(seq, job.attempt) {
                        Some(e) => Err(e),
                        None => Ok(()),
                    }
                }
            })
            .unwrap()
    }
}

#[tokio::test]
async fn jobs_of_one_key_run_one_at_a_time_in_order_and_keys_run_side_by_side() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    // Interleaved, as webhooks of three endpoints arrive.
    for seq in 0..12 {
        for key in ["endpoint:1", "endpoint:2", "endpoint:3"] {
            ids.push(jobq::enqueue(&db.pool, &ordered(key, seq)).await.unwrap());
        }
    }
    // Only the first job of each key is runnable; the others wait for the one before them.
    assert_eq!(db.states().await, "queued=3 waiting=33");
    let seen = Arc::new(Seen::default());
    let worker = db
        .worker(seen.handlers(|_, _| None))
        .config(|c| c.concurrency = 8)
        .start()
        .await;
    wait_until("every job done", Duration::from_secs(60), || async {
        db.states().await == "done=36"
    })
    .await;
    worker.stop().await;
    for (key, seqs) in seen.started.lock().unwrap().iter() {
        assert_eq!(seqs, &(0..12).collect::<Vec<_>>(), "{key}");
    }
    assert_eq!(seen.most_per_key.load(Ordering::SeqCst), 1);
    assert!(
        seen.most_all.load(Ordering::SeqCst) > 1,
        "keys ran side by side"
    );
    let job = jobq::Jobs::new(db.pool.clone()).get(ids[3]).await.unwrap();
    assert_eq!(job.order_key.as_deref(), Some("endpoint:1"));
}

/// A job that fails holds its key through its retries. Once it is dead, the next job runs (`next`), or
/// waits until an operator retries the dead one, which then runs first (`halt`).
#[tokio::test]
async fn a_failing_job_holds_its_key_through_retries_and_a_dead_one_goes_on_or_halts() {
    let db = TestDb::new().await;
    let go_on = |seq| ordered("a", seq).max_attempts(2);
    let halt = |seq| ordered("b", seq).max_attempts(2).order_halt(true);
    let a: Vec<jobq::JobId> = {
        let mut v = Vec::new();
        for seq in 0..3 {
            v.push(jobq::enqueue(&db.pool, &go_on(seq)).await.unwrap());
        }
        v
    };
    let b: Vec<jobq::JobId> = {
        let mut v = Vec::new();
        for seq in 0..3 {
            v.push(jobq::enqueue(&db.pool, &halt(seq)).await.unwrap());
        }
        v
    };
    // Job 1 of each key fails both its attempts (a short backoff); the others succeed.
    let fail_first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let failing = fail_first.clone();
    let seen = Arc::new(Seen::default());
    let handlers = seen.handlers(move |seq, _attempt| {
        (seq == 1 && failing.load(Ordering::SeqCst))
            .then(|| JobError::retry_after("boom", Duration::from_millis(50)))
    });
    let worker = db.worker(handlers).start().await;
    wait_until("a done, b halted", Duration::from_secs(30), || async {
        state(&db, a[2]).await == State::Done && state(&db, b[1]).await == State::Dead
    })
    .await;
    worker.settled().await;
    assert_eq!(state(&db, a[1]).await, State::Dead);
    assert_eq!(
        state(&db, b[2]).await,
        State::Waiting,
        "held by the dead job before it"
    );
    {
        let started = seen.started.lock().unwrap();
        // Job 1 ran twice (its retry) before job 2 started.
        assert_eq!(started["a"], vec![0, 1, 1, 2]);
        assert_eq!(started["b"], vec![0, 1, 1]);
    }
    // The operator retries the dead job: it runs first, then the one it held.
    fail_first.store(false, Ordering::SeqCst);
    jobq::Jobs::new(db.pool.clone()).retry(b[1]).await.unwrap();
    wait_until("b done", Duration::from_secs(30), || async {
        state(&db, b[2]).await == State::Done
    })
    .await;
    worker.stop().await;
    assert_eq!(seen.started.lock().unwrap()["b"], vec![0, 1, 1, 1, 2]);
    assert_eq!(seen.most_per_key.load(Ordering::SeqCst), 1);

    // Cancelling or deleting a halted key's dead job lets the next one go too.
    let c0 = jobq::enqueue(&db.pool, &ordered("c", 0).order_halt(true))
        .await
        .unwrap();
    let c1 = jobq::enqueue(&db.pool, &ordered("c", 1).order_halt(true))
        .await
        .unwrap();
    db.exec(&format!(
        "UPDATE job_queue SET state = 'dead', finished_at = NOW(6) WHERE id = {c0}"
    ))
    .await;
    let reaper = db.reaper();
    assert_eq!(reaper.run_once().await.unwrap().released_waiting, 0);
    assert_eq!(state(&db, c1).await, State::Waiting);
    jobq::Jobs::new(db.pool.clone()).delete(c0).await.unwrap();
    assert_eq!(state(&db, c1).await, State::Queued);
}

/// A worker SIGKILLed in the middle of a key's third job: the reaper makes that job runnable again,
/// and the fourth starts only after the third's second attempt has ended.
#[tokio::test]
async fn a_sigkilled_worker_leaves_the_order_intact() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let (effects, lock) = (dir.join("effects"), dir.join("lock"));
    // One lock for every job of the key: they run one at a time, so no copy ever finds it taken.
    let script = history::recorded_command(
        &effects,
        &lock,
        "if [ $JOBQ_JOB_ID = 3 ] && [ $JOBQ_ATTEMPT = 1 ]; then sleep 30; fi",
    );
    let cfg = write_config(&dir, &history::command_handler("post", &script));
    for seq in 0..5 {
        let out = run_jobq(
            Some(&db.url),
            &[
                "enqueue",
                "post",
                "--order-key",
                "account:9",
                "--payload",
                &format!("{{\"seq\": {seq}}}"),
            ],
        );
        assert!(out.status.success(), "{out:?}");
    }
    let worker = spawn_forever_worker(&db, &cfg);
    wait_until("job 3 running", Duration::from_secs(20), || async {
        std::fs::read_to_string(&effects).is_ok_and(|e| e.contains("start job=3 attempt=1"))
    })
    .await;
    let pid = History::of_commands(&effects, &db.pool).await.copies(3)[0].pid;
    let killed_claimant = sole_worker_token(&db.pool).await;
    kill(Pid::from_raw(worker.id() as i32), Signal::SIGKILL).unwrap();
    let _ = wait_output(worker.take(), Duration::from_secs(5));
    // The first attempt's command dies with its worker (the exec shim): the lock is free at once.
    wait_until(
        "job 3's first copy gone",
        Duration::from_secs(1),
        || async {
            !history::lock_held(&lock)
                && jobq::testing::local_process(pid, None) == jobq::testing::ProcessState::Dead
        },
    )
    .await;
    let gone_at = At::now();
    let reaper = jobq::Reaper::new(db.pool.clone(), jobq::ReaperConfig::default()).unwrap();
    wait_until("job 3 runnable again", Duration::from_secs(15), || async {
        reaper.run_once().await.unwrap();
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE id = 3 AND state = 'queued'")
            .await
            == 1
    })
    .await;
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'waiting'")
            .await,
        2,
        "jobs 4 and 5 still wait"
    );
    let out = jobq(
        Some(&db.url),
        &["worker", "--config", cfg.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(db.states().await, "done=5");
    let mut h = History::of_commands(&effects, &db.pool).await;
    h.saw_gone(3, 1, gone_at);
    h.read_worker_log(&String::from_utf8_lossy(&out.stderr));
    let summary = assert_clean(&h, &Expectations::no_faults().lost(&killed_claimant));
    assert_eq!((summary.copies, summary.rerun), (6, 1), "{}", h.timeline(3));
    // The order: each job's copies start and end before the next job's start, and only job 3 ran
    // twice (its first copy cut short by the kill).
    let text = std::fs::read_to_string(&effects).unwrap();
    let events: Vec<String> = text
        .lines()
        .map(|l| {
            let what = l.split(' ').next().unwrap();
            let job = l.split(' ').find_map(|f| f.strip_prefix("job=")).unwrap();
            format!("{what} {job}")
        })
        .collect();
    assert_eq!(
        events,
        [
            "start 1", "end 1", "start 2", "end 2", "start 3", "start 3", "end 3", "start 4",
            "end 4", "start 5", "end 5"
        ],
        "{text}"
    );
}

#[tokio::test]
async fn plain_sql_enqueues_in_order_with_the_procedure() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    // docs/ordered-keys.md's statements.
    let mut ids = Vec::new();
    for n in 0..3 {
        let id: u64 = sqlx::query_scalar(&format!(
            "CALL jobq_enqueue_keyed('post', '{{\"key\": \"account:9\", \"seq\": {n}}}', 'account:9', 1, FALSE, NULL, NULL)"
        ))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        ids.push(id);
    }
    let states: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(state AS CHAR) FROM job_queue WHERE order_key = 'account:9' ORDER BY id",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert_eq!(states, ["queued", "waiting", "waiting"]);
    // The library joins the same chain.
    let lib = jobq::enqueue(&db.pool, &ordered("account:9", 3))
        .await
        .unwrap();
    let deps = jobq::Jobs::new(db.pool.clone())
        .dependencies(lib)
        .await
        .unwrap();
    assert_eq!(deps.waits_for.len(), 1);
    assert_eq!(deps.waits_for[0].id.0, ids[2]);
    assert_eq!(deps.waits_for[0].until, "next");
    // Inside a transaction with the application's own writes; rolled back, it leaves nothing.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("CALL jobq_enqueue_keyed('post', '{}', 'account:9', 1, TRUE, NULL, NULL)")
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.scalar::<i64>("SELECT COUNT(*) FROM job_queue").await, 4);
    for (call, needle) in [
        (
            "CALL jobq_enqueue_keyed('post', '{}', '', 1, FALSE, NULL, NULL)",
            "the key must not be empty",
        ),
        (
            "CALL jobq_enqueue_keyed('post', '{}', 'k', 0, FALSE, NULL, NULL)",
            "lanes must be from 1 to 64",
        ),
    ] {
        let e = sqlx::query(call)
            .fetch_all(&mut *conn)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{e}");
    }
    // The chain runs in order.
    let seen = Arc::new(Seen::default());
    let report = db.worker(seen.handlers(|_, _| None)).drain().await;
    assert_eq!(report.done, 4);
}

#[tokio::test]
async fn bad_order_settings_are_refused_naming_what_is_wrong() {
    let db = TestDb::new().await;
    for (job, needle) in [
        (
            NewJob::new("x").order_key(""),
            "invalid order key: must not be empty",
        ),
        (
            NewJob::new("x").order_key("k".repeat(256)),
            "invalid order key: is 256 bytes long; the order_key column holds at most 255",
        ),
        (
            NewJob::new("x").order_key("k").unique_key("u"),
            "invalid order_key: cannot be combined with a unique key",
        ),
        (
            NewJob::new("x").order_halt(true),
            "invalid order_halt: needs an order key",
        ),
        (
            NewJob::new("x").fair_key("k", 0),
            "invalid fair_key: at most 0 at once: it must be from 1 to 64",
        ),
        (
            NewJob::new("x").fair_key("k", 65),
            "invalid fair_key: at most 65 at once: it must be from 1 to 64",
        ),
    ] {
        let e = jobq::enqueue(&db.pool, &job).await.unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }
    let mut conn = db.pool.acquire().await.unwrap();
    let e = jobq::enqueue_many(&mut conn, &[NewJob::new("x").order_key("k")])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("enqueue_many takes no ordered jobs"), "{e}");
    let out = run_jobq(
        Some(&db.url),
        &["enqueue", "x", "--order-key", "k", "--unique-key", "u"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{out:?}"
    );
    assert_eq!(db.scalar::<i64>("SELECT COUNT(*) FROM job_queue").await, 0);

    // jobs show names the key and the job it waits for.
    let url = Some(db.url.as_str());
    run_jobq(url, &["enqueue", "post", "--order-key", "account:1"]);
    let second = run_jobq(
        url,
        &[
            "enqueue",
            "post",
            "--order-key",
            "account:1",
            "--order-halt",
        ],
    );
    let id = String::from_utf8_lossy(&second.stdout).trim().to_string();
    let show = String::from_utf8_lossy(&run_jobq(url, &["jobs", "show", &id]).stdout).to_string();
    assert!(
        show.contains("key:          \"account:1\", one at a time, in order"),
        "{show}"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&run_jobq(url, &["jobs", "show", &id, "--json"]).stdout).unwrap();
    assert_eq!(v["order_key"], serde_json::json!("account:1"));
    assert_eq!(v["waits_for"][0]["until"], serde_json::json!("halt"));
}

fn fair(key: &str, seq: u64, max: u16) -> NewJob {
    NewJob::new("post")
        .fair_key(key, max)
        .payload(&serde_json::json!({ "key": key, "seq": seq }))
        .unwrap()
}

/// A fair share of 2: never more than 2 jobs of a key at once, each lane in order, and a key that
/// floods the queue first does not keep its head: with one slot, a later key's first job starts third,
/// not after the flood.
#[tokio::test]
async fn a_fair_key_runs_at_most_its_share_and_keys_take_turns() {
    let db = TestDb::new().await;
    for seq in 0..40 {
        jobq::enqueue(&db.pool, &fair("flood", seq, 2))
            .await
            .unwrap();
    }
    for seq in 0..4 {
        jobq::enqueue(&db.pool, &fair("trickle", seq, 2))
            .await
            .unwrap();
    }
    assert_eq!(db.states().await, "queued=4 waiting=40");
    let seen = Arc::new(Seen::default());
    let report = db
        .worker(seen.handlers(|_, _| None))
        .config(|c| c.concurrency = 1)
        .drain()
        .await;
    assert_eq!(report.done, 44);
    let order = seen.order.lock().unwrap().clone();
    let first_trickle = order.iter().position(|k| k == "trickle").unwrap();
    assert!(
        first_trickle <= 2,
        "the trickle's first job started {first_trickle}th: {order:?}"
    );
    // The trickle's four jobs all ran before the flood's first dozen were through.
    let last_trickle = order.iter().rposition(|k| k == "trickle").unwrap();
    assert!(last_trickle < 12, "{order:?}");

    // With room for 8 at once, a key still runs at most 2, and the two keys run side by side.
    db.exec("DELETE FROM job_queue").await;
    for seq in 0..20 {
        for key in ["a", "b"] {
            jobq::enqueue(&db.pool, &fair(key, seq, 2)).await.unwrap();
        }
    }
    let seen = Arc::new(Seen::default());
    let report = db
        .worker(seen.handlers(|_, _| None))
        .config(|c| c.concurrency = 8)
        .drain()
        .await;
    assert_eq!(report.done, 40);
    assert_eq!(seen.most_per_key.load(Ordering::SeqCst), 2);
    assert!(
        seen.most_all.load(Ordering::SeqCst) >= 3,
        "keys side by side"
    );
    let show = jobq::Jobs::new(db.pool.clone())
        .get(jobq::JobId(
            db.scalar::<u64>("SELECT MAX(id) FROM job_queue").await,
        ))
        .await
        .unwrap();
    assert_eq!(
        show.key_summary().as_deref(),
        Some("\"b\", at most 2 at once")
    );
}

/// `jobq_enqueue_keyed` under autocommit, where each of its statements commits on its own: 8
/// connections × 20 calls of one key while a worker runs the jobs. No two jobs ever wait for the same
/// predecessor, and the key's jobs never run two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_procedure_keeps_one_chain_under_autocommit_and_racing_callers() {
    let db = TestDb::new().await;
    let pool = db.pool(12).await;
    let seen = Arc::new(Seen::default());
    let worker = db
        .worker(seen.handlers(|_, _| None))
        .config(|c| c.concurrency = 4)
        .start()
        .await;
    let mut tasks = Vec::new();
    for caller in 0..8u64 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..20u64 {
                let id: u64 = sqlx::query_scalar(&format!(
                    "CALL jobq_enqueue_keyed('post', '{{\"key\": \"k\", \"seq\": {}}}', 'k', 1, FALSE, NULL, NULL)",
                    caller * 100 + n
                ))
                .fetch_one(&pool)
                .await
                .unwrap();
                assert!(id > 0);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    wait_until("all 160 done", Duration::from_secs(60), || async {
        db.states().await == "done=160"
    })
    .await;
    worker.stop().await;
    assert_eq!(seen.most_per_key.load(Ordering::SeqCst), 1);
    assert_eq!(seen.started.lock().unwrap()["k"].len(), 160);
}

/// A fair share's rate: 5 a second over one lane spaces the key's starts 200 ms apart, by the server's
/// clock, for jobs released by their predecessor and for a job enqueued into an idle lane, from the
/// library and from SQL; a job without a rate is not held back.
#[tokio::test]
async fn a_fair_rate_spaces_the_starts_of_a_key() {
    let db = TestDb::new().await;
    let rated = |seq| fair("r", seq, 1).fair_rate(5, Duration::from_secs(1));
    for seq in 0..3 {
        jobq::enqueue(&db.pool, &rated(seq)).await.unwrap();
    }
    for seq in 3..5 {
        sqlx::query(&format!(
            "CALL jobq_enqueue_keyed('post', '{{\"key\": \"r\", \"seq\": {seq}}}', 'r', 1, FALSE, 5, 1)"
        ))
        .fetch_all(&db.pool)
        .await
        .unwrap();
    }
    let seen = Arc::new(Seen::default());
    let worker = db.worker(seen.handlers(|_, _| None)).start().await;
    wait_until("five done", Duration::from_secs(30), || async {
        db.states().await == "done=5"
    })
    .await;
    // An idle lane: the next job keeps its distance from the last start too.
    let late = jobq::enqueue(&db.pool, &rated(5)).await.unwrap();
    wait_until("six done", Duration::from_secs(30), || async {
        state(&db, late).await == State::Done
    })
    .await;
    worker.stop().await;
    let gaps: Vec<Option<i64>> = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, LAG(started_at) OVER (ORDER BY id), started_at) \
         FROM job_queue ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let gaps: Vec<i64> = gaps.into_iter().flatten().collect();
    assert_eq!(gaps.len(), 5, "{gaps:?}");
    assert!(gaps.iter().all(|g| *g >= 200_000), "{gaps:?}");
    let e = jobq::enqueue(
        &db.pool,
        &NewJob::new("x").fair_rate(5, Duration::from_secs(1)),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("invalid fair_rate: needs an order key or a fair key"),
        "{e}"
    );
    let e = jobq::enqueue(
        &db.pool,
        &fair("r", 9, 1).fair_rate(0, Duration::from_secs(1)),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("invalid fair_rate: 0 per 1s"), "{e}");
}
