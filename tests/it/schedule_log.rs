//! The schedules' change log: who created, changed, paused, resumed, ran, aborted and dropped a schedule,
//! and why; the scheduler's own changes (broken after failures, paused by on_error); from the library
//! and the CLI.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use jobq::schedule::{LogAction, ScheduleLogEntry, ScheduleState};
use jobq::{
    Error, ScheduleDef, Scheduler, SchedulerConfig, Schedules, schedule::Misfire,
    schedule::OnError, schedule::Overlap, scheduler::Clock, scheduler::ManualClock,
};

use crate::common::{TestDb, jobq, wait_output};

/// (action, actor, reason) of each entry, oldest first.
fn summary(log: &[ScheduleLogEntry]) -> Vec<(LogAction, String, Option<String>)> {
    log.iter()
        .rev()
        .map(|e| (e.action, e.actor.clone(), e.reason.clone()))
        .collect()
}

async fn log_rows(db: &TestDb) -> i64 {
    db.scalar("SELECT COUNT(*) FROM jobq_schedule_log").await
}

#[tokio::test]
async fn every_library_change_is_logged_with_its_actor_and_reason() {
    let db = TestDb::new().await;
    let lib = Schedules::new(db.pool.clone());
    let alice = lib.clone().by("alice");
    alice
        .clone()
        .because(Some("nightly sales report"))
        .create(&ScheduleDef::new("report", "report", "every 1h"))
        .await
        .unwrap();
    let mut def = lib.get("report").await.unwrap().def;
    def.priority = 5;
    lib.update(&def).await.unwrap();
    // An update that changes nothing is not a change.
    lib.update(&def).await.unwrap();
    alice
        .clone()
        .because(Some("warehouse maintenance, CHG-1234"))
        .pause("report")
        .await
        .unwrap();
    alice.resume("report").await.unwrap();
    let bob = lib.clone().by("bob").because(Some("rerun after the fix"));
    bob.run_now("report").await.unwrap();
    bob.abort("report").await.unwrap();
    let id = lib.get("report").await.unwrap().id;
    lib.clone()
        .by("carol")
        .because(Some("replaced by report-v2"))
        .remove("report")
        .await
        .unwrap();

    // The log outlives the schedule.
    let log = lib.log("report", 50).await.unwrap();
    let s = |x: &str| x.to_string();
    assert_eq!(
        summary(&log),
        vec![
            (
                LogAction::Create,
                s("alice"),
                Some(s("nightly sales report"))
            ),
            (LogAction::Update, s("library"), None),
            (
                LogAction::Pause,
                s("alice"),
                Some(s("warehouse maintenance, CHG-1234"))
            ),
            (LogAction::Resume, s("alice"), None),
            (LogAction::RunNow, s("bob"), Some(s("rerun after the fix"))),
            (LogAction::Abort, s("bob"), Some(s("rerun after the fix"))),
            (
                LogAction::Drop,
                s("carol"),
                Some(s("replaced by report-v2"))
            ),
        ]
    );
    assert!(
        log.iter()
            .all(|e| e.schedule == "report" && e.schedule_id == id)
    );
    assert!(
        log.windows(2)
            .all(|w| w[0].id > w[1].id && w[0].at >= w[1].at)
    );
    assert_eq!(
        summary(&lib.log("report", 2).await.unwrap())[1].0,
        LogAction::Drop
    );
    // A name never used is not found.
    assert!(matches!(
        lib.log("nope", 10).await,
        Err(Error::ScheduleNotFound { .. })
    ));
}

#[tokio::test]
async fn a_refused_change_writes_nothing_to_the_log() {
    let db = TestDb::new().await;
    let lib = Schedules::new(db.pool.clone());
    lib.create(&ScheduleDef::new("r", "k", "every 1h"))
        .await
        .unwrap();
    let before = log_rows(&db).await;
    // Bad input: named, and nothing is written.
    let e = lib
        .clone()
        .because(Some("   "))
        .pause("r")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid reason: is empty; give one, or leave the reason out"
    );
    let e = lib
        .clone()
        .because(Some("x".repeat(1001)))
        .pause("r")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid reason: is 1001 characters long; at most 1000"
    );
    let e = lib.clone().by("").resume("r").await.unwrap_err();
    assert_eq!(e.to_string(), "invalid actor: must not be empty");
    let e = lib
        .clone()
        .because(Some(""))
        .create(&ScheduleDef::new("r2", "k", "every 1h"))
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("invalid reason"), "{e}");
    assert!(matches!(
        lib.get("r2").await,
        Err(Error::ScheduleNotFound { .. })
    ));
    assert_eq!(lib.get("r").await.unwrap().state, ScheduleState::Enabled);
    // A change the schedule's state refuses is not logged either.
    db.exec("UPDATE jobq_schedules SET state = 'finished' WHERE name = 'r'")
        .await;
    assert!(matches!(
        lib.pause("r").await,
        Err(Error::ScheduleState { .. })
    ));
    assert_eq!(log_rows(&db).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedulers_own_changes_are_logged_with_what_made_it_act() {
    let db = TestDb::new().await;
    let t0 = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
    let clock = ManualClock::new(t0);
    let s = Scheduler::new(
        db.pool(2).await,
        SchedulerConfig {
            clock: Clock::Manual(clock.clone()),
            ..SchedulerConfig::default()
        },
    )
    .unwrap();
    let schedules = s.schedules();
    for (name, on_error) in [("keep", OnError::Keep), ("pause", OnError::Pause)] {
        let mut d = ScheduleDef::new(name, "k", "every 1m").policies(
            Overlap::Allow,
            on_error,
            Misfire::Once,
        );
        d.broken_after = 2;
        schedules.create(&d).await.unwrap();
    }
    for round in 1..=2 {
        clock.advance(Duration::from_secs(60));
        s.run_once().await.unwrap();
        db.exec(&format!(
            "UPDATE job_queue SET state = 'dead', last_error = 'boom {round}', \
             started_at = NOW(6), finished_at = NOW(6) WHERE state = 'queued'"
        ))
        .await;
        s.run_once().await.unwrap();
    }
    assert_eq!(
        schedules.get("keep").await.unwrap().state,
        ScheduleState::Broken
    );
    let keep = schedules.log("keep", 10).await.unwrap();
    assert_eq!(keep[0].action, LogAction::Broken);
    assert_eq!(keep[0].actor, "scheduler");
    assert_eq!(
        keep[0].reason.as_deref(),
        Some("2 failed runs in a row (broken_after = 2); last error: boom 2")
    );
    let pause = schedules.log("pause", 10).await.unwrap();
    assert_eq!(
        summary(&pause)[1],
        (
            LogAction::Pause,
            "scheduler".to_string(),
            Some("a run failed and on_error is pause; error: boom 1".to_string())
        )
    );
    assert_eq!(pause.len(), 2, "{pause:?}");

    // A config sync is logged as the scheduler's, saying where the change came from.
    let synced = Scheduler::new(
        db.pool(2).await,
        SchedulerConfig {
            clock: Clock::Manual(clock.clone()),
            definitions: vec![ScheduleDef::new("from-config", "k", "every 1h")],
            ..SchedulerConfig::default()
        },
    )
    .unwrap();
    synced.sync_definitions().await.unwrap();
    let log = schedules.log("from-config", 10).await.unwrap();
    assert_eq!(
        summary(&log),
        vec![(
            LogAction::Create,
            "scheduler".to_string(),
            Some("synced from the configuration's [schedules] sections".to_string())
        )]
    );
}

/// The newest entry of `name`'s log.
async fn lib_log(db: &TestDb, name: &str) -> ScheduleLogEntry {
    Schedules::new(db.pool.clone())
        .log(name, 1)
        .await
        .unwrap()
        .remove(0)
}

fn run(db: &TestDb, args: &[&str]) -> std::process::Output {
    let child = jobq(Some(&db.url), args)
        .env("USER", "carol")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(60))
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test]
async fn the_cli_logs_its_user_and_reason_and_prints_the_log() {
    let db = TestDb::new().await;
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let carol = format!("carol@{host}");
    ok(&run(
        &db,
        &[
            "schedule",
            "create",
            "nightly",
            "-k",
            "report",
            "-s",
            "daily at 02:00",
        ],
    ));
    ok(&run(
        &db,
        &[
            "schedule",
            "pause",
            "nightly",
            "--reason",
            "DB maintenance tonight",
        ],
    ));
    ok(&run(&db, &["schedule", "resume", "nightly"]));
    ok(&run(
        &db,
        &[
            "schedule",
            "update",
            "nightly",
            "--priority",
            "3",
            "--reason",
            "ahead of ETL",
        ],
    ));
    ok(&run(
        &db,
        &[
            "schedule", "abort", "nightly", "--pause", "--reason", "bad data",
        ],
    ));
    // Bad input is refused with its name, and nothing is written.
    let before = log_rows(&db).await;
    let out = run(&db, &["schedule", "resume", "nightly", "--reason", ""]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid reason: is empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(log_rows(&db).await, before);
    let state: String = db
        .scalar("SELECT CAST(state AS CHAR) FROM jobq_schedules WHERE name = 'nightly'")
        .await;
    assert_eq!(state, "paused");

    let json = ok(&run(&db, &["schedule", "log", "nightly", "--json"]));
    let entries: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let got: Vec<(String, String, Option<String>)> = entries
        .iter()
        .rev()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                e["actor"].as_str().unwrap().to_string(),
                e["reason"].as_str().map(String::from),
            )
        })
        .collect();
    let c = || carol.clone();
    let r = |x: &str| Some(x.to_string());
    assert_eq!(
        got,
        vec![
            ("create".into(), c(), None),
            ("pause".into(), c(), r("DB maintenance tonight")),
            ("resume".into(), c(), None),
            ("update".into(), c(), r("ahead of ETL")),
            ("pause".into(), c(), r("bad data")),
            ("abort".into(), c(), r("bad data")),
        ]
    );
    assert!(entries[0]["at"].as_str().unwrap().ends_with('Z'));

    let text = ok(&run(&db, &["schedule", "log", "nightly", "-n", "2"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("AT (UTC)"), "{text}");
    assert!(
        lines[1].contains(" abort ") && lines[1].contains(&carol) && lines[1].ends_with("bad data")
    );
    assert!(lines[2].contains(" pause "));

    // With neither USER nor LOGNAME set (cron, containers), the uid's name from /etc/passwd.
    let child = jobq(Some(&db.url), &["schedule", "run-now", "nightly"])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    ok(&wait_output(child, Duration::from_secs(60)));
    let id_un = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    let me = String::from_utf8(id_un.stdout).unwrap().trim().to_string();
    let last = lib_log(&db, "nightly").await;
    assert_eq!(
        (last.action, last.actor.as_str()),
        (LogAction::RunNow, format!("{me}@{host}").as_str())
    );

    ok(&run(
        &db,
        &["schedule", "drop", "nightly", "--reason", "retired"],
    ));
    let text = ok(&run(&db, &["schedule", "log", "nightly", "-n", "1"]));
    assert!(text.lines().nth(1).unwrap().ends_with("retired"), "{text}");
    let out = run(&db, &["schedule", "log", "never-was"]);
    assert!(!out.status.success());
}
