//! The scheduler against a real server: exactly one job per planned time with schedulers racing, drift-free
//! intervals, DST in the stored times, each overlap, error and misfire policy, windows, startup runs,
//! pause/resume/abort, config sync, the run loop and registry, and the CLI.
//!
//! Time is a `ManualClock` on a timeline in 2030 wherever a test would otherwise wait: a tick is a call to
//! `run_once`, and a job's end is planted by updating its row, the way River's tests plant rows.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use jobq::schedule::{Cause, Outcome, Overlap, ScheduleRecord, ScheduleState};
use jobq::{
    CancellationToken, Error, Handlers, JobContext, JobError, ScheduleDef, Scheduler,
    SchedulerConfig, scheduler::Clock,
};
use jobq::{
    Schedules, schedule::Misfire, schedule::OnError, scheduler::ManualClock, scheduler::Upserted,
};

use crate::common::{TestDb, run_jobq, scratch_dir, wait_until, write_config};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A scheduler on its own pool, timed by `clock`.
async fn scheduler(db: &TestDb, clock: &ManualClock, cfg: SchedulerConfig) -> Scheduler {
    // Small pools: the test server is shared with every other test running at the same time.
    Scheduler::new(
        db.pool(2).await,
        SchedulerConfig {
            clock: Clock::Manual(clock.clone()),
            ..cfg
        },
    )
    .unwrap()
}

async fn setup() -> (TestDb, ManualClock, Scheduler, Schedules) {
    let db = TestDb::new().await;
    let clock = ManualClock::new(t0());
    let s = scheduler(&db, &clock, SchedulerConfig::default()).await;
    let schedules = s.schedules();
    (db, clock, s, schedules)
}

/// Planned times of a schedule's runs, oldest first.
async fn planned(db: &TestDb, name: &str) -> Vec<DateTime<Utc>> {
    sqlx::query_scalar(
        "SELECT r.planned_at FROM jobq_schedule_runs r JOIN jobq_schedules s ON s.id = r.schedule_id \
         WHERE s.name = ? ORDER BY r.planned_at",
    )
    .bind(name)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Ids of a schedule's jobs, oldest first.
async fn jobs_of(db: &TestDb, name: &str) -> Vec<u64> {
    sqlx::query_scalar(
        "SELECT r.job_id FROM jobq_schedule_runs r JOIN jobq_schedules s ON s.id = r.schedule_id \
         WHERE s.name = ? ORDER BY r.planned_at",
    )
    .bind(name)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Plants the end of a job, as a worker would have written it.
async fn end_job(db: &TestDb, id: u64, state: &str, error: Option<&str>) {
    sqlx::query(
        "UPDATE job_queue SET state = ?, last_error = ?, started_at = NOW(6), finished_at = NOW(6) \
         WHERE id = ?",
    )
    .bind(state)
    .bind(error)
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
}

async fn get(s: &Schedules, name: &str) -> ScheduleRecord {
    s.get(name).await.unwrap()
}

async fn tick(s: &Scheduler) -> jobq::scheduler::TickReport {
    s.run_once().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_schedulers_make_exactly_one_job_per_planned_time() {
    let db = TestDb::new().await;
    let clock = ManualClock::new(t0());
    let mut racers = Vec::new();
    for _ in 0..4 {
        racers.push(Arc::new(
            scheduler(&db, &clock, SchedulerConfig::default()).await,
        ));
    }
    let schedules = racers[0].schedules();
    let specs = [
        ("every-1s", "every 1s"),
        ("every-3s", "every 3s"),
        ("cron-2s", "*/2 * * * * *"),
        ("cron-5s", "*/5 * * * * *"),
        ("every-7s", "every 7s"),
    ];
    for (name, spec) in specs {
        let def = ScheduleDef::new(name, "race", spec).policies(
            Overlap::Allow,
            OnError::Retry,
            Misfire::All,
        );
        schedules.create(&def).await.unwrap();
    }
    // 60 ticks of one second, every scheduler ticking at once each time; some ticks are skipped so
    // that several planned times come due together.
    for step in 1..=60u32 {
        clock.advance(secs(1));
        if step % 7 == 0 {
            continue;
        }
        let mut set = tokio::task::JoinSet::new();
        for r in &racers {
            let r = r.clone();
            set.spawn(async move { r.run_once().await });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
    }
    let end = clock.now();
    for (name, spec) in specs {
        let s = get(&schedules, name).await;
        let want = s.spec().unwrap().upcoming(t0(), s.anchor_at, 1000);
        let want: Vec<_> = want.into_iter().filter(|t| *t <= end).collect();
        assert_eq!(planned(&db, name).await, want, "{name} ({spec})");
        assert_eq!(s.total_runs, want.len() as u64, "{name}");
    }
    // One job per run, and no job without a run.
    let jobs: i64 = db.scalar("SELECT COUNT(*) FROM job_queue").await;
    let runs: i64 = db
        .scalar("SELECT COUNT(DISTINCT job_id) FROM jobq_schedule_runs")
        .await;
    assert_eq!(jobs, runs);
    assert!(jobs > 100, "{jobs}");
}

#[tokio::test]
async fn interval_runs_stay_on_their_grid_however_late_the_ticks() {
    let (db, clock, s, schedules) = setup().await;
    schedules
        .create(&ScheduleDef::new("grid", "k", "every 7s").policies(
            Overlap::Allow,
            OnError::Retry,
            Misfire::Once,
        ))
        .await
        .unwrap();
    let anchor = get(&schedules, "grid").await.anchor_at;
    assert_eq!(anchor, t0());
    // Each tick comes 7 s after the previous plus up to 3 s of lateness: no drift accumulates.
    for i in 1..=150i64 {
        clock.set(anchor + TimeDelta::seconds(7 * i) + TimeDelta::milliseconds((i * 613) % 3000));
        let r = tick(&s).await;
        assert_eq!(r.created, 1, "tick {i}");
    }
    let times = planned(&db, "grid").await;
    assert_eq!(times.len(), 150);
    for (k, t) in times.iter().enumerate() {
        assert_eq!(*t, anchor + TimeDelta::seconds(7 * (k as i64 + 1)));
    }
    // Jobs are due at their planned time (no jitter).
    let off: i64 = db
        .scalar(
            "SELECT COUNT(*) FROM jobq_schedule_runs r JOIN job_queue j ON j.id = r.job_id \
             WHERE j.run_at <> r.planned_at",
        )
        .await;
    assert_eq!(off, 0);
}

#[tokio::test]
async fn dst_gap_and_fold_in_stored_runs() {
    let (db, clock, s, schedules) = setup().await;
    let berlin = ScheduleDef::new("berlin", "k", "daily at 02:30").time_zone("Europe/Berlin");
    let ny = ScheduleDef::new("ny", "k", "30 1 * * *").time_zone("America/New_York");
    for (def, from) in [
        (
            &berlin,
            Utc.with_ymd_and_hms(2030, 3, 29, 12, 0, 0).unwrap(),
        ),
        (&ny, Utc.with_ymd_and_hms(2030, 11, 1, 12, 0, 0).unwrap()),
    ] {
        clock.set(from);
        // One zone at a time: the Berlin schedule would go on through November.
        for other in schedules.list().await.unwrap() {
            schedules.pause(&other.def.name).await.unwrap();
        }
        schedules.create(def).await.unwrap();
        // Jobs end at once, so overlap never holds anything back.
        for _ in 0..(3 * 24 * 4) {
            clock.advance(secs(15 * 60));
            tick(&s).await;
            db.exec(
                "UPDATE job_queue SET state = 'done', finished_at = NOW(6) WHERE state = 'queued'",
            )
            .await;
        }
    }
    let utc = |y, mo, d, h, mi| Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap();
    // Berlin 2030-03-31: 02:30 does not exist; the run is at 03:00 CEST, once.
    assert_eq!(
        planned(&db, "berlin").await,
        [
            utc(2030, 3, 30, 1, 30),
            utc(2030, 3, 31, 1, 0),
            utc(2030, 4, 1, 0, 30)
        ]
    );
    // New York 2030-11-03: 01:30 happens twice; the run is at the first, once.
    assert_eq!(
        planned(&db, "ny").await,
        [
            utc(2030, 11, 2, 5, 30),
            utc(2030, 11, 3, 5, 30),
            utc(2030, 11, 4, 6, 30)
        ]
    );
}

#[tokio::test]
async fn overlap_wait_skip_and_allow() {
    let (db, clock, s, schedules) = setup().await;
    for (name, overlap) in [
        ("wait", Overlap::Wait),
        ("skip", Overlap::Skip),
        ("allow", Overlap::Allow),
    ] {
        let def = ScheduleDef::new(name, "k", "every 10s").policies(
            overlap,
            OnError::Retry,
            Misfire::Once,
        );
        schedules.create(&def).await.unwrap();
    }
    clock.advance(secs(10));
    assert_eq!(tick(&s).await.created, 3);
    // The first runs' jobs are still queued at the next planned time.
    clock.advance(secs(10));
    let r = tick(&s).await;
    assert_eq!((r.created, r.held, r.skipped), (1, 1, 1), "{r:?}");
    assert_eq!(planned(&db, "wait").await.len(), 1);
    assert_eq!(planned(&db, "skip").await.len(), 1);
    assert_eq!(planned(&db, "allow").await.len(), 2);
    assert_eq!(
        get(&schedules, "skip").await.next_run_at,
        Some(t0() + TimeDelta::seconds(30))
    );
    assert_eq!(get(&schedules, "skip").await.skipped_runs, 1);
    // "wait" stays due and runs its held time as soon as the previous run ends.
    let wait = get(&schedules, "wait").await;
    assert_eq!(wait.next_run_at, Some(t0() + TimeDelta::seconds(20)));
    clock.advance(secs(5));
    assert_eq!(tick(&s).await.created, 0);
    end_job(&db, jobs_of(&db, "wait").await[0], "done", None).await;
    let r = tick(&s).await;
    assert_eq!((r.created, r.ended_runs), (1, 1), "{r:?}");
    assert_eq!(
        planned(&db, "wait").await,
        [t0() + TimeDelta::seconds(10), t0() + TimeDelta::seconds(20)]
    );
    assert_eq!(
        get(&schedules, "wait").await.next_run_at,
        Some(t0() + TimeDelta::seconds(30))
    );
}

#[tokio::test]
async fn error_policies_failures_and_broken() {
    let (db, clock, s, schedules) = setup().await;
    let mk = |name: &str, on_error| {
        let mut d = ScheduleDef::new(name, "k", "every 1m").policies(
            Overlap::Allow,
            on_error,
            Misfire::Once,
        );
        d.broken_after = 3;
        d
    };
    schedules.create(&mk("keep", OnError::Keep)).await.unwrap();
    schedules
        .create(&mk("retry", OnError::Retry))
        .await
        .unwrap();
    schedules
        .create(&mk("pause", OnError::Pause))
        .await
        .unwrap();
    clock.advance(secs(60));
    tick(&s).await;
    // The error policy decides each job's attempts: keep and pause one, retry three (worker backoff).
    let attempts: Vec<(String, u16)> = sqlx::query_as(
        "SELECT CAST(s.name AS CHAR), j.max_attempts FROM jobq_schedule_runs r \
         JOIN jobq_schedules s ON s.id = r.schedule_id JOIN job_queue j ON j.id = r.job_id ORDER BY s.name",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        attempts,
        [("keep".into(), 1), ("pause".into(), 1), ("retry".into(), 3)]
    );

    // Every run fails. "pause" pauses after its first failure; the others go on until broken at 3.
    for round in 1..=3 {
        for name in ["keep", "retry", "pause"] {
            if let Some(id) = jobs_of(&db, name).await.last() {
                end_job(&db, *id, "dead", Some(&format!("boom {round}"))).await;
            }
        }
        let r = tick(&s).await;
        if round == 1 {
            assert_eq!(r.paused, 1, "{r:?}");
        }
        clock.advance(secs(60));
        tick(&s).await;
    }
    let keep = get(&schedules, "keep").await;
    assert_eq!(keep.state, ScheduleState::Broken);
    assert_eq!(keep.consecutive_failures, 3);
    assert_eq!(keep.last_error.as_deref(), Some("boom 3"));
    assert_eq!(get(&schedules, "retry").await.state, ScheduleState::Broken);
    let pause = get(&schedules, "pause").await;
    assert_eq!(pause.state, ScheduleState::Paused);
    assert_eq!(pause.consecutive_failures, 1);
    assert_eq!(planned(&db, "pause").await.len(), 1);
    // A broken schedule creates nothing more.
    let runs_before = planned(&db, "keep").await.len();
    clock.advance(secs(600));
    tick(&s).await;
    assert_eq!(planned(&db, "keep").await.len(), runs_before);
    // Only an enabled schedule can be paused: a broken one is resumed instead.
    let e = schedules.pause("keep").await.unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleState { name, state, .. } if name == "keep" && state == "broken"),
        "{e}"
    );

    // Resume: failures reset, next run from now (missed times are not made up).
    let now = clock.now();
    let keep = schedules.resume("keep").await.unwrap();
    assert_eq!(keep.state, ScheduleState::Enabled);
    assert_eq!(keep.consecutive_failures, 0);
    assert!(keep.next_run_at.unwrap() > now);
    // A success resets the count.
    clock.set(keep.next_run_at.unwrap());
    tick(&s).await;
    end_job(
        &db,
        *jobs_of(&db, "keep").await.last().unwrap(),
        "dead",
        Some("x"),
    )
    .await;
    tick(&s).await;
    assert_eq!(get(&schedules, "keep").await.consecutive_failures, 1);
    clock.advance(secs(60));
    tick(&s).await;
    end_job(
        &db,
        *jobs_of(&db, "keep").await.last().unwrap(),
        "done",
        None,
    )
    .await;
    tick(&s).await;
    let keep = get(&schedules, "keep").await;
    assert_eq!((keep.consecutive_failures, keep.total_failures), (0, 4));
    // The history shows each run's outcome.
    let runs = schedules.runs("keep", 100).await.unwrap();
    assert_eq!(runs[0].outcome, Some(Outcome::Done));
    assert_eq!(runs[1].outcome, Some(Outcome::Failed));
    assert_eq!(runs[1].error.as_deref(), Some("x"));
}

#[tokio::test]
async fn misfire_policies_after_an_outage() {
    let db = TestDb::new().await;
    let clock = ManualClock::new(t0());
    let s = scheduler(
        &db,
        &clock,
        SchedulerConfig {
            max_catch_up: 10,
            misfire_grace: secs(10),
            ..SchedulerConfig::default()
        },
    )
    .await;
    let schedules = s.schedules();
    for (name, misfire) in [
        ("once", Misfire::Once),
        ("all", Misfire::All),
        ("skip", Misfire::Skip),
    ] {
        let def = ScheduleDef::new(name, "k", "every 1m").policies(
            Overlap::Allow,
            OnError::Retry,
            misfire,
        );
        schedules.create(&def).await.unwrap();
    }
    // Down for two hours: 120 planned times passed, the last one 30 s ago (later than the 10 s grace).
    clock.set(t0() + TimeDelta::minutes(120) + TimeDelta::seconds(30));
    let r = tick(&s).await;
    assert_eq!(r.created, 11, "{r:?}");
    assert_eq!(planned(&db, "once").await, [t0() + TimeDelta::minutes(120)]);
    assert!(planned(&db, "skip").await.is_empty());
    let all = planned(&db, "all").await;
    assert_eq!(all.len(), 10, "the newest max_catch_up only");
    assert_eq!(all[0], t0() + TimeDelta::minutes(111));
    let causes: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT CAST(cause AS CHAR) FROM jobq_schedule_runs")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(causes, ["catch_up"]);
    for name in ["once", "all", "skip"] {
        let rec = get(&schedules, name).await;
        assert_eq!(
            rec.next_run_at,
            Some(t0() + TimeDelta::minutes(121)),
            "{name}"
        );
    }
    assert_eq!(get(&schedules, "skip").await.skipped_runs, 120);
    assert_eq!(get(&schedules, "once").await.skipped_runs, 119);
    assert_eq!(get(&schedules, "all").await.skipped_runs, 110);
    // Back to normal: each runs its next time.
    clock.set(t0() + TimeDelta::minutes(121));
    assert_eq!(tick(&s).await.created, 3);
}

#[tokio::test]
async fn the_per_tick_cap_spreads_a_burst_over_ticks() {
    let db = TestDb::new().await;
    let clock = ManualClock::new(t0());
    let s = scheduler(
        &db,
        &clock,
        SchedulerConfig {
            max_jobs_per_tick: 7,
            ..SchedulerConfig::default()
        },
    )
    .await;
    for i in 0..20 {
        s.schedules()
            .create(&ScheduleDef::new(format!("s{i}"), "k", "every 1h"))
            .await
            .unwrap();
    }
    clock.advance(secs(3600));
    let created: Vec<u64> = [
        tick(&s).await,
        tick(&s).await,
        tick(&s).await,
        tick(&s).await,
    ]
    .iter()
    .map(|r| r.created)
    .collect();
    assert_eq!(created, [7, 7, 6, 0]);
}

#[tokio::test]
async fn window_start_end_and_once() {
    let (db, clock, s, schedules) = setup().await;
    let mut def = ScheduleDef::new("window", "k", "every 1m");
    def.start_at = Some(t0() + TimeDelta::hours(1));
    def.end_at = Some(t0() + TimeDelta::hours(1) + TimeDelta::minutes(3));
    let rec = schedules.create(&def).await.unwrap();
    assert_eq!(rec.next_run_at, def.start_at);
    schedules
        .create(&ScheduleDef::new("once", "k", "once at 2030-01-01 00:30"))
        .await
        .unwrap();
    // Step through two hours a minute at a time; jobs end at once.
    for _ in 0..120 {
        clock.advance(secs(60));
        tick(&s).await;
        db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6) WHERE state = 'queued'")
            .await;
    }
    let w: Vec<_> = (0..=3).map(|m| t0() + TimeDelta::minutes(60 + m)).collect();
    assert_eq!(planned(&db, "window").await, w);
    assert_eq!(
        get(&schedules, "window").await.state,
        ScheduleState::Finished
    );
    assert_eq!(get(&schedules, "window").await.next_run_at, None);
    assert_eq!(planned(&db, "once").await, [t0() + TimeDelta::minutes(30)]);
    assert_eq!(get(&schedules, "once").await.state, ScheduleState::Finished);
    // A once time in the past is refused, and nothing is written.
    let e = schedules
        .create(&ScheduleDef::new("late", "k", "once at 2029-12-31 00:00"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleInvalid { name, reason } if name == "late" && reason.contains("passed")),
        "{e}"
    );
    assert!(matches!(
        schedules.get("late").await,
        Err(Error::ScheduleNotFound { name }) if name == "late"
    ));
    // Resuming a finished schedule is refused; changing its window revives it.
    let e = schedules.resume("window").await.unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleState { state, .. } if state == "finished"),
        "{e}"
    );
    assert!(e.to_string().contains("`jobq schedule update`"), "{e}");
    def.end_at = Some(clock.now() + TimeDelta::hours(1));
    assert_eq!(schedules.update(&def).await.unwrap(), Upserted::Rescheduled);
    assert_eq!(
        get(&schedules, "window").await.state,
        ScheduleState::Enabled
    );
}

#[tokio::test]
async fn pause_resume_and_abort() {
    let (db, clock, s, schedules) = setup().await;
    let def = ScheduleDef::new("p", "k", "every 1m").policies(
        Overlap::Allow,
        OnError::Retry,
        Misfire::Once,
    );
    schedules.create(&def).await.unwrap();
    clock.advance(secs(60));
    assert_eq!(tick(&s).await.created, 1);
    schedules.pause("p").await.unwrap();
    for _ in 0..5 {
        clock.advance(secs(60));
        assert_eq!(tick(&s).await.created, 0);
    }
    let rec = schedules.resume("p").await.unwrap();
    assert_eq!(rec.state, ScheduleState::Enabled);
    assert_eq!(rec.next_run_at, Some(t0() + TimeDelta::minutes(7)));
    clock.advance(secs(60));
    assert_eq!(tick(&s).await.created, 1);

    // Abort: one job queued, one running (claimed by some worker), one done already.
    clock.advance(secs(60));
    tick(&s).await;
    let jobs = jobs_of(&db, "p").await;
    assert_eq!(jobs.len(), 3);
    end_job(&db, jobs[0], "done", None).await;
    sqlx::query(
        "UPDATE job_queue SET state = 'running', claim = 'h:1:1:1-1:0', attempts = 1, \
         started_at = NOW(6) WHERE id = ?",
    )
    .bind(jobs[1])
    .execute(&db.pool)
    .await
    .unwrap();
    let r = schedules.abort("p").await.unwrap();
    assert_eq!(r.cancelled, 2);
    let state: String = db
        .scalar(&format!(
            "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = {}",
            jobs[2]
        ))
        .await;
    assert_eq!(state, "cancelled");
    let requested: i64 = db
        .scalar(&format!(
            "SELECT cancel_requested_at IS NOT NULL FROM job_queue WHERE id = {}",
            jobs[1]
        ))
        .await;
    assert_eq!(requested, 1, "the running job's worker is asked to stop it");
    // Cancelled runs are not failures.
    tick(&s).await;
    let rec = get(&schedules, "p").await;
    assert_eq!(
        (rec.consecutive_failures, rec.state),
        (0, ScheduleState::Enabled)
    );
    let outcomes: Vec<Option<Outcome>> = schedules
        .runs("p", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [Some(Outcome::Cancelled), None, Some(Outcome::Done)]
    );
    // run-now makes a job at once, whatever the state.
    schedules.pause("p").await.unwrap();
    // At the very instant of the last scheduled run, the unique key refuses a second job for it.
    let e = schedules.run_now("p").await.unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleRunExists { planned_at, .. } if *planned_at == clock.now()),
        "{e}"
    );
    assert_eq!(jobs_of(&db, "p").await.len(), 3);
    clock.advance(secs(1));
    let id = schedules.run_now("p").await.unwrap();
    assert!(id.0 > jobs[2]);
    assert_eq!(
        schedules.runs("p", 1).await.unwrap()[0].cause,
        Cause::Manual
    );
}

#[tokio::test]
async fn startup_runs_once_per_scheduler_start() {
    let (db, clock, s, schedules) = setup().await;
    let mut def = ScheduleDef::new("boot", "k", "daily at 03:00");
    def.at_startup = true;
    schedules.create(&def).await.unwrap();
    schedules
        .create(&ScheduleDef::new("plain", "k", "daily at 03:00"))
        .await
        .unwrap();
    assert_eq!(s.startup().await.unwrap(), 1);
    // The previous startup run has not ended (overlap wait): a second start makes none.
    clock.advance(secs(5));
    assert_eq!(s.startup().await.unwrap(), 0);
    db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6)")
        .await;
    clock.advance(secs(5));
    assert_eq!(s.startup().await.unwrap(), 1);
    assert_eq!(
        planned(&db, "boot").await,
        [t0(), t0() + TimeDelta::seconds(10)]
    );
    assert!(planned(&db, "plain").await.is_empty());
    // Startup runs do not move the schedule's own times.
    assert_eq!(
        get(&schedules, "boot").await.next_run_at,
        Some(t0() + TimeDelta::hours(3))
    );
}

#[tokio::test]
async fn config_sync_upserts_by_name_without_losing_state() {
    let (db, clock, s, schedules) = setup().await;
    let def = ScheduleDef::new("synced", "k", "every 10m")
        .payload(&serde_json::json!({"b": 2, "a": 1}))
        .unwrap();
    assert_eq!(
        schedules.sync(std::slice::from_ref(&def)).await.unwrap()[0].1,
        Upserted::Created
    );
    // Creating it again is refused by the name's unique key, and says so.
    let e = schedules.create(&def).await.unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleExists { name } if name == "synced"),
        "{e}"
    );
    clock.advance(secs(600));
    assert_eq!(tick(&s).await.created, 1);
    let before = get(&schedules, "synced").await;
    clock.advance(secs(120));
    // Same definition (the payload reformatted): nothing changes.
    let same = ScheduleDef {
        payload: r#"{ "a": 1, "b": 2 }"#.into(),
        ..def.clone()
    };
    assert_eq!(
        schedules.sync(&[same]).await.unwrap()[0].1,
        Upserted::Unchanged
    );
    let after = get(&schedules, "synced").await;
    assert_eq!(after.next_run_at, before.next_run_at);
    assert_eq!(after.anchor_at, before.anchor_at);
    // Another queue: updated, next run kept.
    let requeued = def.clone().queue("other");
    assert_eq!(
        schedules
            .sync(std::slice::from_ref(&requeued))
            .await
            .unwrap()[0]
            .1,
        Upserted::Updated
    );
    assert_eq!(
        get(&schedules, "synced").await.next_run_at,
        before.next_run_at
    );
    // Another spec: next run computed from now.
    let respec = ScheduleDef {
        spec: "every 1h".into(),
        ..requeued
    };
    assert_eq!(
        schedules.sync(&[respec]).await.unwrap()[0].1,
        Upserted::Rescheduled
    );
    let r = get(&schedules, "synced").await;
    assert_eq!(r.next_run_at, Some(clock.now() + TimeDelta::hours(1)));
    let n: i64 = db.scalar("SELECT COUNT(*) FROM jobq_schedules").await;
    assert_eq!(n, 1);
    assert_eq!(
        planned(&db, "synced").await.len(),
        1,
        "no run lost or added"
    );
}

/// Processes syncing the same config at once: each upsert of a new name either creates it or, having
/// lost the insert to another, updates the one that won. None fails.
#[tokio::test]
async fn concurrent_upserts_of_a_new_name_all_succeed() {
    let db = TestDb::new().await;
    let clock = ManualClock::new(t0());
    let def = ScheduleDef::new("shared", "k", "every 10m");
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let schedules = Schedules::with_clock(db.pool(2).await, Clock::Manual(clock.clone()));
        let def = def.clone();
        set.spawn(async move { schedules.upsert(&def).await });
    }
    let results: Vec<Upserted> = set
        .join_all()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        results.iter().filter(|r| **r == Upserted::Created).count(),
        1,
        "{results:?}"
    );
    let n: i64 = db.scalar("SELECT COUNT(*) FROM jobq_schedules").await;
    assert_eq!(n, 1);
}

#[tokio::test]
async fn the_run_loop_registers_makes_jobs_and_stops() {
    let db = TestDb::new().await;
    // The database clock, as in production, ticking fast.
    let s = Scheduler::new(
        db.pool(2).await,
        SchedulerConfig {
            interval: Duration::from_millis(50),
            // No worker ends the jobs here: with the default overlap (wait) the second run would wait.
            definitions: vec![ScheduleDef::new("loop", "k", "every 1s").policies(
                Overlap::Allow,
                OnError::Retry,
                Misfire::Once,
            )],
            ..SchedulerConfig::default()
        },
    )
    .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(s.run(stop.clone()));
    wait_until("the scheduler registers", secs(10), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_processes WHERE role = 'scheduler'")
            .await
            == 1
    })
    .await;
    wait_until("two runs", secs(10), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_schedule_runs")
            .await
            >= 2
    })
    .await;
    stop.cancel();
    tokio::time::timeout(secs(10), task)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
    let procs: i64 = db.scalar("SELECT COUNT(*) FROM jobq_processes").await;
    assert_eq!(procs, 0);
}

#[tokio::test]
async fn a_real_worker_runs_scheduled_jobs_and_abort_stops_a_running_one() {
    let db = TestDb::new().await;
    let schedules = Schedules::new(db.pool.clone());
    let s = Scheduler::new(db.pool.clone(), SchedulerConfig::default()).unwrap();
    schedules
        .create(&ScheduleDef::new("slow", "slow", "every 1s"))
        .await
        .unwrap();
    wait_until("a run", secs(10), || async {
        s.run_once().await.unwrap().created > 0
    })
    .await;
    let handlers = Handlers::new()
        .register("slow", |job: JobContext| async move {
            job.cancelled().await;
            Err::<(), _>(JobError::retry("stopped"))
        })
        .unwrap();
    let worker = db
        .worker(handlers)
        .config(|c| c.heartbeat_interval = Duration::from_millis(100))
        .start()
        .await;
    wait_until("the job runs", secs(10), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'running'")
            .await
            == 1
    })
    .await;
    assert_eq!(schedules.abort("slow").await.unwrap().cancelled, 1);
    wait_until("the job is cancelled", secs(10), || async {
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'cancelled'")
            .await
            == 1
    })
    .await;
    worker.stop().await;
    s.run_once().await.unwrap();
    let runs = schedules.runs("slow", 10).await.unwrap();
    assert_eq!(runs.last().unwrap().outcome, Some(Outcome::Cancelled));
    assert_eq!(get(&schedules, "slow").await.consecutive_failures, 0);
}

#[tokio::test]
async fn cli_schedule_commands() {
    let db = TestDb::new().await;
    let url = Some(db.url.as_str());
    let ok = |args: &[&str]| {
        let out = run_jobq(url, args);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    // A bad value is refused with 1; a flag value clap parses (an enum) with 2, a usage error.
    let fails_with = |status: i32, args: &[&str], needles: &[&str]| {
        let out = run_jobq(url, args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: want {n:?} in:\n{err}");
        }
    };
    let fails = |args: &[&str], needles: &[&str]| fails_with(1, args, needles);

    // Checking a spec needs no database.
    let out = run_jobq(
        None,
        &[
            "schedule",
            "next",
            "--spec",
            "daily at 02:30",
            "--tz",
            "Europe/Berlin",
            "-n",
            "2",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains("CET") || text.contains("CEST"), "{text}");

    fails(
        &["schedule", "next", "--spec", "0 25 * * *"],
        &["field 2 (hour)", "\"25\"", "0-23"],
    );
    fails(
        &[
            "schedule",
            "create",
            "x",
            "-k",
            "k",
            "-s",
            "0 3 * * *",
            "--tz",
            "Mars/Base",
        ],
        &["unknown time zone \"Mars/Base\""],
    );
    fails(
        &["schedule", "create", "x", "-k", "k", "-s", "0 3 1,2,x * *"],
        &["field 3 (day of month)", "\"x\""],
    );
    fails_with(
        2,
        &[
            "schedule",
            "create",
            "x",
            "-k",
            "k",
            "-s",
            "every 1m",
            "--overlap",
            "sometimes",
        ],
        &["--overlap", "wait, skip, allow"],
    );
    let n: i64 = db.scalar("SELECT COUNT(*) FROM jobq_schedules").await;
    assert_eq!(n, 0, "nothing written");

    let text = ok(&[
        "schedule",
        "create",
        "report",
        "-k",
        "report",
        "-s",
        "monthly on -1 at 23:00",
        "--tz",
        "America/New_York",
        "--payload",
        r#"{"x":1}"#,
        "--on-error",
        "keep",
    ]);
    assert!(text.contains("schedule report created; next run"), "{text}");
    let text = ok(&["schedule", "list"]);
    assert!(
        text.contains("report") && text.contains("monthly on -1 at 23:00"),
        "{text}"
    );
    let text = ok(&["schedule", "next", "report", "-n", "3"]);
    assert_eq!(text.lines().count(), 3, "{text}");
    let id = ok(&["schedule", "run-now", "report"]);
    let id: u64 = id.trim().parse().unwrap();
    end_job(&db, id, "dead", Some("disk full")).await;
    ok(&["scheduler", "--once"]);
    let text = ok(&["schedule", "show", "report"]);
    assert!(text.contains("failures:      1 in a row"), "{text}");
    assert!(text.contains("last error:    disk full"), "{text}");
    assert!(text.contains("manual") && text.contains("dead"), "{text}");
    ok(&["schedule", "pause", "report"]);
    assert!(ok(&["schedule", "list"]).contains("paused"));
    let text = ok(&["schedule", "resume", "report"]);
    assert!(text.contains("is enabled"), "{text}");
    let text = ok(&["schedule", "update", "report", "-s", "every 5m"]);
    assert!(text.contains("rescheduled"), "{text}");
    let text = ok(&["schedule", "abort", "report", "--pause"]);
    assert!(
        text.contains("0 job(s)") && text.contains("paused"),
        "{text}"
    );
    assert!(ok(&["schedule", "runs", "report"]).contains("disk full"));
    ok(&["schedule", "drop", "report"]);
    fails(
        &["schedule", "show", "report"],
        &["schedule \"report\": no such schedule"],
    );

    // [schedules.NAME] in jobq.toml: synced by `jobq scheduler`, validated at load.
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[schedules.nightly]\nkind = \"report\"\nspec = \"30 2 * * *\"\ntime_zone = \"Europe/Paris\"\n\
         payload = { format = \"pdf\" }\novershoot = 1\n",
    );
    let cfg_s = cfg.to_str().unwrap();
    fails(&["scheduler", "--once", "--config", cfg_s], &["overshoot"]);
    let cfg = write_config(
        &dir,
        "[schedules.nightly]\nkind = \"report\"\nspec = \"30 2 * 13 *\"\n",
    );
    fails(
        &["scheduler", "--once", "--config", cfg.to_str().unwrap()],
        &["schedules.nightly", "field 4 (month)"],
    );
    let cfg = write_config(
        &dir,
        "[schedules.nightly]\nkind = \"report\"\nspec = \"30 2 * * *\"\ntime_zone = \"Europe/Paris\"\n\
         payload = { format = \"pdf\" }\noverlap = \"skip\"\n",
    );
    ok(&["scheduler", "--once", "--config", cfg.to_str().unwrap()]);
    ok(&["scheduler", "--once", "--config", cfg.to_str().unwrap()]);
    let text = ok(&["schedule", "show", "nightly"]);
    assert!(
        text.contains("overlap skip") && text.contains("\"pdf\""),
        "{text}"
    );
    let n: i64 = db.scalar("SELECT COUNT(*) FROM jobq_schedules").await;
    assert_eq!(n, 1);
    std::fs::remove_dir_all(&dir).ok();

    for args in [
        &["schedule", "--help"][..],
        &["schedule", "create", "--help"],
        &["schedule", "update", "--help"],
        &["schedule", "drop", "--help"],
        &["schedule", "list", "--help"],
        &["schedule", "show", "--help"],
        &["schedule", "runs", "--help"],
        &["schedule", "pause", "--help"],
        &["schedule", "resume", "--help"],
        &["schedule", "run-now", "--help"],
        &["schedule", "next", "--help"],
        &["schedule", "abort", "--help"],
        &["scheduler", "--help"],
    ] {
        let out = run_jobq(None, args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("Usage:"),
            "{args:?}:\n{text}"
        );
    }
}
