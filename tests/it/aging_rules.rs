//! Priority aging's rules: how far a job rises (the floor), what a retry, a snooze, a release and an
//! operator's retry do to an aged job, the settings refused and why, and how `jobq jobs show`, `jobq
//! queue list`, the dashboard and the API show it. Jobs are planted due an hour ago rather than waited
//! for; passes are made with `jobq::testing::age_priorities`.

use std::time::Duration;

use jobq::testing::{Finish, age_priorities, claim_batch, finish};
use jobq::{JobId, Queues};

use crate::common::{TestDb, dashboard_get, run_jobq};

/// Inserts a job of `queue` at `priority`, due an hour ago (sixty one-minute steps).
async fn waited_an_hour(db: &TestDb, queue: &str, priority: i16) -> JobId {
    db.exec(&format!(
        "INSERT INTO job_queue (queue, kind, priority, run_at) \
         VALUES ('{queue}', 'k', {priority}, NOW(6) - INTERVAL 1 HOUR)"
    ))
    .await;
    JobId(db.scalar("SELECT MAX(id) FROM job_queue").await)
}

async fn pass(db: &TestDb) -> u64 {
    age_priorities(&mut db.pool.acquire().await.unwrap())
        .await
        .unwrap()
}

/// (priority, base_priority) of job `id`.
async fn priorities(db: &TestDb, id: JobId) -> (i16, Option<i16>) {
    let j = jobq::Jobs::new(db.pool.clone()).get(id).await.unwrap();
    (j.priority, j.base_priority)
}

#[tokio::test]
async fn a_job_rises_to_the_floor_or_to_the_most_urgent_waiting_level_and_no_further() {
    let db = TestDb::new().await;
    let queues = Queues::new(db.pool.clone());
    let minute = Duration::from_secs(60);
    // Queue a: nothing set, so the most urgent waiting job (priority 2) is the floor.
    let top = waited_an_hour(&db, "a", 2).await;
    let low = waited_an_hour(&db, "a", 40).await;
    queues.age("a", minute, None, "t").await.unwrap();
    // Queue b: a floor of 5 holds the job below the urgent level.
    waited_an_hour(&db, "b", -3).await;
    let held = waited_an_hour(&db, "b", 20).await;
    queues.age("b", minute, Some(5), "t").await.unwrap();
    // Queue c: a floor more urgent than any waiting job is the most urgent waiting level.
    waited_an_hour(&db, "c", 1).await;
    let capped = waited_an_hour(&db, "c", 30).await;
    queues.age("c", minute, Some(-100), "t").await.unwrap();
    // Queue d: no aging; queue e: its jobs have waited less than one step of two hours.
    let untouched = waited_an_hour(&db, "d", 9).await;
    let young = waited_an_hour(&db, "e", 9).await;
    waited_an_hour(&db, "e", 0).await;
    queues
        .age("e", Duration::from_secs(7200), None, "t")
        .await
        .unwrap();

    assert_eq!(pass(&db).await, 3);
    assert_eq!(priorities(&db, top).await, (2, None));
    assert_eq!(priorities(&db, low).await, (2, Some(40)));
    assert_eq!(priorities(&db, held).await, (5, Some(20)));
    assert_eq!(priorities(&db, capped).await, (1, Some(30)));
    assert_eq!(priorities(&db, untouched).await, (9, None));
    assert_eq!(priorities(&db, young).await, (9, None));
    assert_eq!(pass(&db).await, 0, "a second pass finds nothing more to do");

    // A step of 25 minutes: an hour is two whole steps, counted from the base.
    let stepped = waited_an_hour(&db, "f", 10).await;
    waited_an_hour(&db, "f", 0).await;
    queues
        .age("f", Duration::from_secs(25 * 60), None, "t")
        .await
        .unwrap();
    pass(&db).await;
    assert_eq!(priorities(&db, stepped).await, (8, Some(10)));
}

/// A waiting row whose payload is not valid JSON (written with MariaDB's check off) fails every UPDATE
/// of it, so it failed each pass's UPDATE of its level, pass after pass, and no job of the level rose.
/// The pass sets it aside as the claim does (dead, not run, payload kept) and raises the rest.
#[tokio::test]
async fn a_row_whose_payload_is_not_json_is_set_aside_and_its_level_still_rises() {
    use sqlx::Connection;
    let db = TestDb::new().await;
    let mut app = db.unchecked_conn().await;
    let bad = sqlx::query(
        "INSERT INTO job_queue (queue, kind, priority, run_at, payload) \
         VALUES ('a', 'k', 40, NOW(6) - INTERVAL 2 HOUR, '{oops')",
    )
    .execute(&mut app)
    .await
    .unwrap()
    .last_insert_id();
    app.close().await.unwrap();
    waited_an_hour(&db, "a", 2).await;
    let low = waited_an_hour(&db, "a", 40).await;
    Queues::new(db.pool.clone())
        .age("a", Duration::from_secs(60), None, "t")
        .await
        .unwrap();

    assert_eq!(pass(&db).await, 1);
    assert_eq!(priorities(&db, low).await, (2, Some(40)));
    let (state, error): (String, String) =
        sqlx::query_as("SELECT CAST(state AS CHAR), last_error FROM job_queue WHERE id = ?")
            .bind(bad)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(state, "dead");
    assert!(error.contains("not valid JSON"), "{error}");
}

/// A retry, a snooze and an operator's retry end the job's wait: it is back at its base priority. A
/// release (the job never started) keeps what it earned.
#[tokio::test]
async fn a_retry_or_snooze_puts_an_aged_job_back_and_a_release_keeps_its_rise() {
    let db = TestDb::new().await;
    // A job of a kind the claims below leave alone keeps the queue's most urgent level at 0.
    waited_an_hour(&db, "default", 0).await;
    db.exec("UPDATE job_queue SET kind = 'other'").await;
    let id = waited_an_hour(&db, "default", 10).await;
    Queues::new(db.pool.clone())
        .age("default", Duration::from_secs(60), Some(3), "t")
        .await
        .unwrap();
    let kinds = ["k".to_string()];
    let claim = |token: &'static str| {
        let pool = db.pool.clone();
        let kinds = kinds.clone();
        async move {
            let jobs = claim_batch(&pool, token, "default", &kinds, 1)
                .await
                .unwrap();
            assert_eq!(jobs[0].id, id);
            jobs[0].attempt()
        }
    };
    let replant = || db.exec("UPDATE job_queue SET run_at = NOW(6) - INTERVAL 1 HOUR");

    pass(&db).await;
    assert_eq!(priorities(&db, id).await, (3, Some(10)));
    let attempt = claim("t1").await;
    assert!(
        finish(&db.pool, id, "t1", attempt, &Finish::Release)
            .await
            .unwrap()
    );
    assert_eq!(
        priorities(&db, id).await,
        (3, Some(10)),
        "a release keeps it"
    );

    let attempt = claim("t2").await;
    let retry = Finish::Retry {
        delay: Duration::ZERO,
        error: "boom".into(),
    };
    assert!(finish(&db.pool, id, "t2", attempt, &retry).await.unwrap());
    assert_eq!(
        priorities(&db, id).await,
        (10, None),
        "a retry puts it back"
    );

    replant().await;
    pass(&db).await;
    assert_eq!(priorities(&db, id).await, (3, Some(10)));
    let attempt = claim("t3").await;
    let snooze = Finish::Snooze {
        delay: Duration::ZERO,
    };
    assert!(finish(&db.pool, id, "t3", attempt, &snooze).await.unwrap());
    assert_eq!(
        priorities(&db, id).await,
        (10, None),
        "a snooze puts it back"
    );

    replant().await;
    pass(&db).await;
    let attempt = claim("t4").await;
    let dead = Finish::Dead {
        error: "gone".into(),
    };
    assert!(finish(&db.pool, id, "t4", attempt, &dead).await.unwrap());
    assert_eq!(
        priorities(&db, id).await,
        (3, Some(10)),
        "it ended where it ran"
    );
    jobq::Jobs::new(db.pool.clone()).retry(id).await.unwrap();
    assert_eq!(
        priorities(&db, id).await,
        (10, None),
        "an operator's retry puts it back"
    );
}

#[tokio::test]
async fn bad_aging_settings_are_refused_naming_what_is_wrong() {
    let db = TestDb::new().await;
    let url = Some(db.url.as_str());
    let refused = |args: &[&str], says: &[&str]| {
        let out = run_jobq(url, args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} must fail");
        for s in says {
            assert!(err.contains(s), "{args:?}: {s:?} not in {err}");
        }
    };
    let step = "whole milliseconds between 1ms and 7days";
    refused(
        &["queue", "age", "q", "--every", "0s"],
        &["aging step", step],
    );
    refused(
        &["queue", "age", "q", "--every", "1500us"],
        &["aging step", "1ms 500us", step],
    );
    refused(
        &["queue", "age", "q", "--every", "8d"],
        &["aging step", "8days"],
    );
    refused(
        &["queue", "age", "q", "--every", "5m", "--floor", "40000"],
        &["--floor", "40000"],
    );
    refused(&["queue", "age", "q"], &["--every", "--off"]);
    refused(
        &["queue", "age", "q", "--every", "5m", "--off"],
        &["--off", "--every"],
    );
    refused(&["queue", "age", "no spaces", "--every", "5m"], &["queue"]);
    let none: i64 = db.scalar("SELECT COUNT(*) FROM jobq_queue_aging").await;
    assert_eq!(none, 0, "nothing was written");

    // The library says the same, and plain SQL is held to a positive step by the table.
    let e = Queues::new(db.pool.clone())
        .age("q", Duration::ZERO, None, "t")
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            jobq::Error::Invalid {
                what: "aging step",
                ..
            }
        ),
        "{e}"
    );
    let sql = sqlx::query("INSERT INTO jobq_queue_aging (queue, every_secs) VALUES ('q', 0)")
        .execute(&db.pool)
        .await
        .unwrap_err()
        .to_string();
    assert!(sql.contains("aging_step_positive"), "{sql}");
}

/// Set from the CLI (or SQL), an aging is listed by `jobq queue list` and the dashboard; an aged job
/// shows both priorities in `jobq jobs show`, its `--json`, its page and the API.
#[tokio::test]
async fn the_cli_the_dashboard_and_the_api_show_aging() {
    let db = TestDb::new().await;
    let url = Some(db.url.as_str());
    waited_an_hour(&db, "mail", 0).await;
    let id = waited_an_hour(&db, "mail", 10).await;
    let out = run_jobq(url, &["queue", "age", "mail", "--every", "5m"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("queue mail: jobs gain 1 priority per 5m waited"),
        "{said}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no reaper is running"),
        "{out:?}"
    );
    db.exec(
        "INSERT INTO jobq_queue_aging (queue, every_secs, floor_priority) VALUES ('bulk', 300, 0)",
    )
    .await;
    let list = String::from_utf8(run_jobq(url, &["queue", "list"]).stdout).unwrap();
    assert!(list.contains("bulk") && list.contains("up to 0"), "{list}");
    let json: serde_json::Value =
        serde_json::from_slice(&run_jobq(url, &["queue", "list", "--json"]).stdout).unwrap();
    assert_eq!(json["aging"][1]["queue"], "mail");
    assert_eq!(json["aging"][1]["every_secs"], 300.0);
    assert_eq!(json["aging"][0]["floor_priority"], 0);

    let reaper = jobq::Reaper::new(db.pool.clone(), jobq::ReaperConfig::default()).unwrap();
    assert_eq!(
        reaper.run_once().await.unwrap().aged,
        1,
        "a reaper pass ages"
    );
    let ids = id.to_string();
    let show = String::from_utf8(run_jobq(url, &["jobs", "show", &ids]).stdout).unwrap();
    assert!(show.contains("priority:     0 (aged from 10)"), "{show}");
    let json: serde_json::Value =
        serde_json::from_slice(&run_jobq(url, &["jobs", "show", &ids, "--json"]).stdout).unwrap();
    assert_eq!(
        (&json["priority"], &json["base_priority"]),
        (&0.into(), &10.into())
    );

    let app = jobq::web::router(db.pool.clone(), jobq::web::WebConfig::default()).unwrap();
    let page = dashboard_get(&app, &format!("/jobs/{id}")).await.1;
    assert!(
        page.contains("0 <span class=\"aged\">(aged from 10)</span>"),
        "{page}"
    );
    let api: serde_json::Value =
        serde_json::from_str(&dashboard_get(&app, &format!("/api/jobs/{id}")).await.1).unwrap();
    assert_eq!(api["base_priority"], 10);
    let overview = dashboard_get(&app, "/").await.1;
    assert!(overview.contains("ages 1 per 5m"), "{overview}");
    let api: serde_json::Value =
        serde_json::from_str(&dashboard_get(&app, "/api/overview").await.1).unwrap();
    assert_eq!(api["aging"][1]["queue"], "mail");

    let out = run_jobq(url, &["queue", "age", "mail", "--off"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no longer age"),
        "{out:?}"
    );
    assert_eq!(
        priorities(&db, id).await,
        (0, Some(10)),
        "a raised job keeps its rise"
    );
}
