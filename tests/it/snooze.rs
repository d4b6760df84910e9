//! Snoozing (a handler asks to run again later without failing) and per-kind attempts and backoff, from
//! the library and from `jobq.toml` command handlers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use jobq::handler::HandlerOptions;
use jobq::{Handlers, JobContext, JobError, RetryPolicy};

use crate::common::{TestDb, run_jobq, scratch_dir, write_config};

async fn drain(db: &TestDb, handlers: Handlers) -> jobq::WorkerReport {
    db.worker(handlers).pool(db.pool.clone()).drain().await
}

/// (state, attempts, max_attempts, seconds from now to run_at, last_error)
async fn row(db: &TestDb, id: u64) -> (String, u16, Option<u16>, f64, Option<String>) {
    sqlx::query_as(
        "SELECT CAST(state AS CHAR), attempts, max_attempts, \
         TIMESTAMPDIFF(MICROSECOND, NOW(6), run_at) / 1e6, CAST(last_error AS CHAR) \
         FROM job_queue WHERE id = ?",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// (attempt, outcome, error) of job `id`'s recorded attempts, oldest first.
async fn attempts(db: &TestDb, id: u64) -> Vec<(u16, String, Option<String>)> {
    sqlx::query_as(
        "SELECT attempt, CAST(outcome AS CHAR), CAST(error AS CHAR) FROM jobq_attempts \
         WHERE job_id = ? ORDER BY id",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

async fn make_due(db: &TestDb, id: u64) {
    db.exec(&format!(
        "UPDATE job_queue SET run_at = NOW(6) WHERE id = {id}"
    ))
    .await;
}

#[tokio::test]
async fn a_library_snooze_requeues_without_using_an_attempt() {
    let db = TestDb::new().await;
    // One attempt allowed: three snoozes and then a success must still end done.
    db.exec("INSERT INTO job_queue (kind, max_attempts) VALUES ('poll', 1)")
        .await;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handlers = {
        let (calls, seen) = (calls.clone(), seen.clone());
        Handlers::new()
            .register("poll", move |job: JobContext| {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                seen.lock().unwrap().push(job.attempt);
                async move {
                    if n <= 3 {
                        Err(JobError::snooze(Duration::from_secs(3600)))
                    } else {
                        Ok(())
                    }
                }
            })
            .unwrap()
    };
    for round in 1..=3 {
        let report = drain(&db, handlers.clone()).await;
        assert_eq!((report.claimed, report.snoozed, report.retried), (1, 1, 0));
        let (state, attempts_now, max, run_in, last_error) = row(&db, 1).await;
        assert_eq!(
            (state.as_str(), attempts_now, max, last_error),
            ("queued", 0, Some(1), None),
            "after snooze {round}"
        );
        assert!((3590.0..=3600.0).contains(&run_in), "run_at in {run_in} s");
        make_due(&db, 1).await;
    }
    let report = drain(&db, handlers).await;
    assert_eq!(report.done, 1);
    let (state, attempts_now, ..) = row(&db, 1).await;
    assert_eq!((state.as_str(), attempts_now), ("done", 1));
    assert_eq!(*seen.lock().unwrap(), vec![1, 1, 1, 1]);
    let snoozed = Some("snoozed for 1h".to_string());
    assert_eq!(
        attempts(&db, 1).await,
        vec![
            (1, "snoozed".into(), snoozed.clone()),
            (1, "snoozed".into(), snoozed.clone()),
            (1, "snoozed".into(), snoozed),
        ]
    );
    // The view counts no failure for it.
    let failures: i64 = db
        .scalar("SELECT failures FROM jobq_jobs WHERE id = 1")
        .await;
    assert_eq!(failures, 0);
}

#[tokio::test]
async fn a_snooze_past_the_timestamp_range_is_refused_and_fails_the_attempt() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (kind, max_attempts) VALUES ('far', 1)")
        .await;
    let handlers = Handlers::new()
        .register("far", |_job: JobContext| async {
            Err::<(), _>(JobError::snooze(Duration::from_secs(3_155_760_000)))
        })
        .unwrap();
    drain(&db, handlers).await;
    let (state, attempts_now, _, _, last_error) = row(&db, 1).await;
    assert_eq!((state.as_str(), attempts_now), ("dead", 1));
    let e = last_error.unwrap();
    assert!(
        e.starts_with("refused to snooze: a snooze of 100years ")
            && e.contains(
                "past what a TIMESTAMP holds (1970-01-01 00:00:01 to 2038-01-19 03:14:07 UTC)"
            ),
        "{e}"
    );
    assert_eq!(attempts(&db, 1).await[0].1, "dead");
}

#[tokio::test]
async fn a_handlers_own_attempts_and_backoff_replace_the_workers() {
    let db = TestDb::new().await;
    db.insert_jobs("flaky", 1).await;
    let seen_max = Arc::new(AtomicU32::new(0));
    let options = HandlerOptions {
        max_attempts: Some(2),
        retry: Some(RetryPolicy {
            base: Duration::from_secs(3600),
            cap: Duration::from_secs(3600),
        }),
        ..HandlerOptions::default()
    };
    let handlers = {
        let seen_max = seen_max.clone();
        Handlers::new()
            .register_with_options(
                "flaky",
                move |job: JobContext| {
                    seen_max.store(u32::from(job.max_attempts), Ordering::SeqCst);
                    async { Err::<(), _>(JobError::retry("down")) }
                },
                options,
            )
            .unwrap()
    };
    drain(&db, handlers.clone()).await;
    assert_eq!(seen_max.load(Ordering::SeqCst), 2);
    // The handler's backoff (30 to 60 min at the first failure), not the worker's 1 to 2 s; the row
    // now carries the handler's bound, which it had none of (NULL: the handler's, else 20).
    let (state, attempts_now, max, run_in, _) = row(&db, 1).await;
    assert_eq!((state.as_str(), attempts_now, max), ("retry", 1, Some(2)));
    assert!((1790.0..=3600.0).contains(&run_in), "run_at in {run_in} s");
    make_due(&db, 1).await;
    drain(&db, handlers).await;
    let (state, attempts_now, max, ..) = row(&db, 1).await;
    assert_eq!((state.as_str(), attempts_now, max), ("dead", 2, Some(2)));

    // Out-of-range options are refused when registering, naming the kind and the field.
    let bad = |o: HandlerOptions| {
        Handlers::new()
            .register_with_options("k", |_j: JobContext| async { Ok(()) }, o)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        bad(HandlerOptions {
            max_attempts: Some(0),
            ..HandlerOptions::default()
        }),
        "handlers.k: max_attempts must be at least 1"
    );
    assert_eq!(
        bad(HandlerOptions {
            retry: Some(RetryPolicy {
                base: Duration::from_secs(60),
                cap: Duration::from_secs(1),
            }),
            ..HandlerOptions::default()
        }),
        "handlers.k: retry_cap (1s) is below retry_base (1m)"
    );
}

#[tokio::test]
async fn command_handlers_snooze_on_exit_75_and_take_their_own_attempts_and_backoff() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        r#"
[retry]
base = "1s"
cap = "1s"

[handlers.tempfail]
command = ["sh", "-c", "exit 75"]
snooze = "10m"

[handlers.plain75]
command = ["sh", "-c", "exit 75"]

[handlers.flaky]
command = ["sh", "-c", "echo down >&2; exit 1"]
max_attempts = 2
retry_base = "1h"
retry_cap = "1h"
"#,
    );
    let cfg = cfg.to_str().unwrap();
    db.exec(
        "INSERT INTO job_queue (id, kind) VALUES (1, 'tempfail'), (2, 'plain75'), (3, 'flaky')",
    )
    .await;
    let out = run_jobq(Some(&db.url), &["worker", "--config", cfg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Exit 75 with `snooze` set: back to queued in 10 minutes, the attempt not counted.
    let (state, attempts_now, _, run_in, last_error) = row(&db, 1).await;
    assert_eq!(
        (state.as_str(), attempts_now, last_error),
        ("queued", 0, None)
    );
    assert!((590.0..=600.0).contains(&run_in), "run_at in {run_in} s");
    assert_eq!(
        attempts(&db, 1).await,
        vec![(1, "snoozed".into(), Some("snoozed for 10m".into()))]
    );

    // Exit 75 without `snooze`: a failure like any other, with the global backoff.
    let (state, attempts_now, _, run_in, last_error) = row(&db, 2).await;
    assert_eq!((state.as_str(), attempts_now), ("retry", 1));
    assert!(run_in <= 1.0, "run_at in {run_in} s");
    assert!(last_error.unwrap().contains("exited with status 75"));

    // `max_attempts` and the backoff of [handlers.flaky] apply (the row set no max_attempts), not 20
    // and [retry]'s 1 s.
    let (state, attempts_now, max, run_in, _) = row(&db, 3).await;
    assert_eq!((state.as_str(), attempts_now, max), ("retry", 1, Some(2)));
    assert!((1790.0..=3600.0).contains(&run_in), "run_at in {run_in} s");
    make_due(&db, 3).await;
    db.exec("UPDATE job_queue SET state = 'done' WHERE id = 2")
        .await;
    let out = run_jobq(Some(&db.url), &["worker", "--config", cfg]);
    assert!(out.status.success());
    let (state, attempts_now, ..) = row(&db, 3).await;
    assert_eq!((state.as_str(), attempts_now), ("dead", 2));
}

#[tokio::test]
async fn bad_handler_settings_are_refused_before_anything_runs() {
    let db = TestDb::new().await;
    db.insert_jobs("q", 1).await;
    let dir = scratch_dir();
    for (text, want) in [
        (
            "[handlers.q]\nsql = \"DO 1\"\nsnooze = \"1m\"\n",
            "handlers.q: `env`, `inherit_env` and `snooze` belong to `command` handlers",
        ),
        (
            "[handlers.q]\ncommand = [\"true\"]\nsnooze = \"100y\"\n",
            "handlers.q: snooze: a snooze of 100years would put run_at past what a TIMESTAMP holds",
        ),
        (
            "[handlers.q]\ncommand = [\"true\"]\nsnooze = \"0s\"\n",
            "handlers.q: snooze must be above zero",
        ),
        (
            "[handlers.q]\ncommand = [\"true\"]\nmax_attempts = 0\n",
            "handlers.q: max_attempts must be at least 1",
        ),
        (
            "[handlers.q]\ncommand = [\"true\"]\nretry_base = \"2h\"\n",
            "handlers.q: retry_cap (1h) is below retry_base (2h)",
        ),
    ] {
        let cfg = write_config(&dir, text);
        let out = run_jobq(
            Some(&db.url),
            &["worker", "--config", cfg.to_str().unwrap()],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{text}: {err}");
    }
    assert_eq!(db.states().await, "queued=1");
}
