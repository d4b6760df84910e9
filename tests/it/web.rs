//! The dashboard's pages and API, through the real router on a real database: what each page shows,
//! the actions and their audit entries, and every refusal (credentials, CSRF, cross-site, read-only,
//! bad input).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use jobq::web::{Credentials, WebConfig, router};
use tower::ServiceExt;

use crate::common::{TestDb, wait_until};

struct Resp {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

/// Sends `req` as a browser on the machine does: with `Host: 127.0.0.1:8080` unless it names one.
async fn send(app: &Router, mut req: Request<Body>) -> Resp {
    if !req.headers().contains_key(header::HOST) {
        req.headers_mut()
            .insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
    }
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 10 << 20)
        .await
        .unwrap();
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn get(app: &Router, uri: &str) -> Resp {
    send(app, Request::get(uri).body(Body::empty()).unwrap()).await
}

/// The CSRF cookie a first page view hands out.
async fn csrf(app: &Router, home: &str) -> String {
    let r = get(app, home).await;
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
    let token = cookie
        .strip_prefix("jobq_csrf=")
        .and_then(|c| c.split(';').next())
        .unwrap();
    token.to_string()
}

/// A form POST as a browser on the dashboard's own page sends it.
fn form_post(uri: &str, token: &str, body: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::COOKIE, format!("jobq_csrf={token}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .body(Body::from(format!("csrf={token}&{body}")))
        .unwrap()
}

/// A JSON POST as a script on the dashboard's own origin sends it: the CSRF token in its header.
fn api_post(uri: &str, token: &str, json: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::COOKIE, format!("jobq_csrf={token}"))
        .header("x-csrf-token", token)
        .header(header::CONTENT_TYPE, "application/json")
        .header("sec-fetch-site", "same-origin")
        .body(Body::from(json.to_string()))
        .unwrap()
}

fn json(r: &Resp) -> serde_json::Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body))
}

async fn state(db: &TestDb, id: u64) -> String {
    db.scalar(&format!(
        "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = {id}"
    ))
    .await
}

fn app(db: &TestDb, cfg: WebConfig) -> Router {
    router(db.pool.clone(), cfg).unwrap()
}

async fn seeded() -> TestDb {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, payload) SELECT 'resize', JSON_OBJECT('id', seq) \
         FROM seq_1_to_120",
    )
    .await;
    db.exec(
        "UPDATE job_queue SET state = 'dead', attempts = 3, finished_at = NOW(6), \
         last_error = 'boom <script>alert(1)</script>' WHERE id <= 5",
    )
    .await;
    db.exec(
        "UPDATE job_queue SET state = 'done', finished_at = NOW(6) - INTERVAL 2 MINUTE \
         WHERE id BETWEEN 6 AND 60",
    )
    .await;
    // The chart's done jobs are the workers' counts (schema 40), not the rows: as a worker that
    // finished them would have written.
    add_done(&db, 2, 55).await;
    db
}

/// Adds `n` done jobs to the chart's count `minutes_ago` minutes back, as a worker's heartbeat does.
async fn add_done(db: &TestDb, minutes_ago: i64, n: i64) {
    db.exec(&format!(
        "INSERT INTO jobq_done_minutes (minute, holder, done) \
         VALUES (FLOOR(UNIX_TIMESTAMP(NOW(6)) / 60) - {minutes_ago}, 'seed', {n}) \
         ON DUPLICATE KEY UPDATE done = done + {n}"
    ))
    .await;
}

#[tokio::test]
async fn every_page_renders_what_the_database_holds_escaped() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());

    let overview = get(&app, "/").await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(
        overview.body.contains("<b id=\"due\">60</b>"),
        "{}",
        overview.body
    );
    assert!(overview.body.contains("55 done, 0 dead") || overview.body.contains("peak 55/min"));
    let csp = overview.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(csp.contains("default-src 'none'"), "{csp}");

    let dead = get(&app, "/jobs?state=dead&queue=&kind=&error=").await;
    assert_eq!(dead.status, StatusCode::OK);
    assert_eq!(
        dead.body.matches("type=\"checkbox\" name=\"id\"").count(),
        5,
        "{}",
        dead.body
    );
    assert!(
        !dead.body.contains("<script>alert"),
        "error text must be escaped"
    );
    assert!(dead.body.contains("&lt;script&gt;alert(1)"));

    let by_error = get(&app, "/jobs?error=%3Cscript").await;
    assert_eq!(
        by_error
            .body
            .matches("type=\"checkbox\" name=\"id\"")
            .count(),
        5
    );
    let literal_percent = get(&app, "/jobs?error=%25").await;
    assert_eq!(
        literal_percent
            .body
            .matches("type=\"checkbox\" name=\"id\"")
            .count(),
        0,
        "% is not a wildcard"
    );

    db.exec(
        "INSERT INTO jobq_attempts (job_id, attempt, outcome, claim, started_at, error) \
         VALUES (3, 1, 'retry', 'h:1:2:3-4:00ff', NOW(6), 'first <b>failure</b>')",
    )
    .await;
    let job = get(&app, "/jobs/3").await;
    assert_eq!(job.status, StatusCode::OK);
    assert!(job.body.contains("id=\"attempts\""));
    assert!(
        job.body.contains("first &lt;b&gt;failure&lt;/b&gt;"),
        "{}",
        job.body
    );
    assert!(
        job.body.contains("title=\"h:1:2:3-4:00ff\""),
        "{}",
        job.body
    );
    assert!(
        job.body.contains(">h pid 1<"),
        "the claimant's host and pid: {}",
        job.body
    );
    let api: serde_json::Value =
        serde_json::from_str(&get(&app, "/api/jobs/3").await.body).unwrap();
    assert_eq!(api["attempts"], 3);
    assert_eq!(api["attempt_history"][0]["outcome"], "retry");
    assert!(
        job.body.contains("&quot;id&quot;: 3"),
        "payload pretty-printed: {}",
        job.body
    );
    assert!(job.body.contains("data-action=\"retry\""));

    for page in ["/schedules", "/processes", "/audit"] {
        let r = get(&app, page).await;
        assert_eq!(r.status, StatusCode::OK, "{page}");
    }
    let css = get(&app, "/assets/app.css").await;
    assert!(
        css.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
}

#[tokio::test]
async fn the_jobs_list_pages_by_id_and_the_api_says_where_the_next_page_starts() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let first = get(&app, "/jobs").await;
    assert_eq!(
        first.body.matches("type=\"checkbox\" name=\"id\"").count(),
        50
    );
    assert!(first.body.contains("before=71"), "older link after id 71");
    let third = get(&app, "/jobs?before=21").await;
    assert_eq!(
        third.body.matches("type=\"checkbox\" name=\"id\"").count(),
        20
    );
    assert!(
        !third.body.contains("id=\"older\""),
        "no older page after the last"
    );

    let api = get(&app, "/api/jobs?state=dead&limit=2").await;
    let v: serde_json::Value = serde_json::from_str(&api.body).unwrap();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(v["jobs"][0]["id"], 5);
    assert_eq!(v["jobs"][0]["payload"]["id"], 5, "payload embedded as JSON");
    assert_eq!(v["next_before"], 4);
    let rest = get(&app, "/api/jobs?state=dead&limit=10&before=4").await;
    let v: serde_json::Value = serde_json::from_str(&rest.body).unwrap();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 3);
    assert!(v["next_before"].is_null());
    let o: serde_json::Value =
        serde_json::from_str(&get(&app, "/api/overview").await.body).unwrap();
    assert_eq!(o["queues"][0]["queue"], "default");
    assert_eq!(o["queues"][0]["waiting"], 60);
    assert_eq!(o["queues"][0]["due"], 60);
    let done = o["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["state"] == "done")
        .unwrap();
    assert_eq!(
        (done["count"].as_i64(), done["capped"].as_bool()),
        (Some(55), Some(false))
    );
    assert_eq!(o["unserved"][0]["reason"], "no_worker_on_queue");
    assert_eq!(last_hour_done(&o), 55);
}

fn last_hour_done(overview: &serde_json::Value) -> i64 {
    let minutes = overview["last_hour"].as_array().unwrap();
    assert_eq!(minutes.len(), 60);
    minutes.iter().map(|m| m["done"].as_i64().unwrap()).sum()
}

/// The chart's minutes are kept between views and only the last two counted again: what finishes
/// after a view shows in the next one, and what was counted before stays.
#[tokio::test]
async fn the_last_hour_chart_stays_right_across_views() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let view = |app: Router| async move {
        let o: serde_json::Value =
            serde_json::from_str(&get(&app, "/api/overview").await.body).unwrap();
        last_hour_done(&o)
    };
    assert_eq!(view(app.clone()).await, 55);
    add_done(&db, 0, 10).await;
    assert_eq!(view(app.clone()).await, 65, "new finishes show");
    add_done(&db, 30, 3).await;
    // A minute already final is not counted again: rows that land there later (a clock moved
    // back, say) are not seen, and the kept counts are not lost either.
    assert_eq!(view(app.clone()).await, 65);
    // A dashboard started now counts the whole hour.
    let fresh = router(db.pool.clone(), WebConfig::default()).unwrap();
    assert_eq!(view(fresh).await, 68);
}

/// A worker adds the jobs it finished done to the chart's counts with its heartbeats while it runs,
/// and the rest when it stops: every done job is counted once, under its token.
#[tokio::test]
async fn a_workers_done_jobs_reach_the_chart_with_its_heartbeats_and_its_stop() {
    let db = TestDb::new().await;
    let handlers = jobq::Handlers::new()
        .register("ok", |_job: jobq::JobContext| async {
            Ok::<(), jobq::JobError>(())
        })
        .unwrap();
    let worker = db
        .worker(handlers)
        .config(|c| c.heartbeat_interval = Duration::from_millis(200))
        .start()
        .await;
    db.insert_jobs("ok", 30).await;
    let counted =
        || db.scalar::<i64>("SELECT CAST(COALESCE(SUM(done), 0) AS SIGNED) FROM jobq_done_minutes");
    // While it runs: the heartbeat writes what it counted.
    wait_until("the heartbeat's count", Duration::from_secs(10), || async {
        counted().await == 30
    })
    .await;
    db.insert_jobs("ok", 12).await;
    wait_until("the jobs done", Duration::from_secs(10), || async {
        db.states().await == "done=42"
    })
    .await;
    let report = worker.stop().await;
    assert_eq!(report.done, 42);
    // Whatever the last heartbeat had not written, the stop did.
    assert_eq!(counted().await, 42);
    let holders: i64 = db
        .scalar("SELECT COUNT(DISTINCT holder) FROM jobq_done_minutes")
        .await;
    assert_eq!(holders, 1, "one process, one token");
    let app = app(&db, WebConfig::default());
    let o: serde_json::Value =
        serde_json::from_str(&get(&app, "/api/overview").await.body).unwrap();
    assert_eq!(last_hour_done(&o), 42);
}

#[tokio::test]
async fn bad_input_gets_a_status_and_a_message_naming_it() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let r = get(&app, "/jobs?state=bogus").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("bogus"), "{}", r.body);
    let r = get(&app, "/jobs?before=x1").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("x1"));
    assert_eq!(
        get(&app, "/jobs/999999").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(get(&app, "/nowhere").await.status, StatusCode::NOT_FOUND);
    let r = get(&app, "/api/jobs/999999").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert!(v["error"].as_str().unwrap().contains("999999"));
    assert_eq!(
        get(&app, "/api/schedules/nope").await.status,
        StatusCode::NOT_FOUND
    );
    let jump = get(&app, "/jobs?id=%2342").await;
    assert_eq!(jump.status, StatusCode::SEE_OTHER);
    assert_eq!(jump.headers[header::LOCATION], "/jobs/42");
    assert!(
        router(
            db.pool.clone(),
            WebConfig {
                prefix: "jobq/".into(),
                ..Default::default()
            }
        )
        .is_err()
    );
}

#[tokio::test]
async fn changes_need_the_csrf_token_and_a_same_site_browser_and_are_audited() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/").await;

    // No token, a wrong one, a token without its cookie: refused, nothing changed.
    let bare = Request::post("/jobs/1/retry").body(Body::empty()).unwrap();
    assert_eq!(send(&app, bare).await.status, StatusCode::FORBIDDEN);
    let wrong = form_post("/jobs/1/retry", &token, "").into_parts();
    let mut req = Request::from_parts(wrong.0, Body::from("csrf=00000000000000000000000000000000"));
    req.headers_mut()
        .insert("sec-fetch-site", "same-origin".parse().unwrap());
    assert_eq!(send(&app, req).await.status, StatusCode::FORBIDDEN);
    let mut cross = form_post("/jobs/1/retry", &token, "");
    cross
        .headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().unwrap());
    assert_eq!(send(&app, cross).await.status, StatusCode::FORBIDDEN);
    assert_eq!(state(&db, 1).await, "dead");

    // With it: done, redirected with a notice, audited.
    let r = send(&app, form_post("/jobs/1/retry", &token, "")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        r.headers[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/jobs/1?notice=")
    );
    assert_eq!(state(&db, 1).await, "queued");
    let audit: (String, String, String, u64) = sqlx::query_as(
        "SELECT CAST(actor AS CHAR), CAST(action AS CHAR), CAST(target AS CHAR), affected \
         FROM jobq_audit ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(audit, ("local".into(), "job.retry".into(), "1".into(), 1));

    // A refused change (retrying a queued job) is a 409 page that says why, and is not audited.
    let r = send(&app, form_post("/jobs/1/retry", &token, "")).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(r.body.contains("already waiting"), "{}", r.body);
    assert_eq!(db.scalar::<i64>("SELECT COUNT(*) FROM jobq_audit").await, 1);

    // Delete asks first.
    let r = send(&app, form_post("/jobs/2/delete", &token, "")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("Delete job 2?"));
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE id = 2")
            .await,
        1
    );
    let r = send(&app, form_post("/jobs/2/delete", &token, "confirm=yes")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE id = 2")
            .await,
        0
    );
}

#[tokio::test]
async fn a_bulk_action_on_a_selection_is_confirmed_then_done_row_by_row() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/jobs").await;
    // Jobs 3 and 4 are dead (retryable); job 100 is queued (refused for retry).
    let pick = "id=3&id=4&id=100&action=retry";
    let r = send(&app, form_post("/jobs/bulk", &token, pick)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("Retry 3 jobs?"), "{}", r.body);
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'dead'")
            .await,
        5
    );
    let r = send(
        &app,
        form_post("/jobs/bulk", &token, &format!("{pick}&confirm=yes")),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let notice = r.headers[header::LOCATION].to_str().unwrap().to_string();
    assert!(notice.contains("2+of+3"), "{notice}");
    assert!(notice.contains("1+refused"), "{notice}");
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'dead'")
            .await,
        3
    );
    let audit: (String, String, u64) = sqlx::query_as(
        "SELECT CAST(action AS CHAR), CAST(target AS CHAR), affected FROM jobq_audit \
             ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(audit, ("jobs.retry".into(), "3,4,100".into(), 2));
}

#[tokio::test]
async fn read_only_shows_no_buttons_and_refuses_every_change() {
    let db = seeded().await;
    let app = app(
        &db,
        WebConfig {
            read_only: true,
            ..Default::default()
        },
    );
    let page = get(&app, "/jobs/1").await;
    assert!(page.body.contains("read-only"));
    assert!(!page.body.contains("data-action=\"retry\""));
    let token = csrf(&app, "/").await;
    let r = send(&app, form_post("/jobs/1/retry", &token, "")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.body.contains("read-only"));
    assert_eq!(state(&db, 1).await, "dead");
}

#[tokio::test]
async fn credentials_are_required_when_set_and_a_bearer_token_needs_no_csrf() {
    let db = seeded().await;
    jobq::Schedules::new(db.pool.clone())
        .create(&jobq::ScheduleDef::new("nightly", "report", "0 3 * * *"))
        .await
        .unwrap();
    let app = app(
        &db,
        WebConfig {
            credentials: Credentials {
                basic: Some(("ops".into(), "s3cret".into())),
                token: Some("t0ken".into()),
            },
            ..Default::default()
        },
    );
    let r = get(&app, "/").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(
        r.headers[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Basic")
    );
    let basic = |pw: &str| {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("ops:{pw}"))
        )
    };
    let wrong = Request::get("/")
        .header(header::AUTHORIZATION, basic("nope"))
        .body(Body::empty());
    assert_eq!(
        send(&app, wrong.unwrap()).await.status,
        StatusCode::UNAUTHORIZED
    );
    let right = Request::get("/")
        .header(header::AUTHORIZATION, basic("s3cret"))
        .body(Body::empty());
    assert_eq!(send(&app, right.unwrap()).await.status, StatusCode::OK);

    // Basic auth is sent by browsers on their own, so a POST with it still needs the CSRF token.
    let post = Request::post("/api/schedules/nightly/pause")
        .header(header::AUTHORIZATION, basic("s3cret"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, post).await.status, StatusCode::FORBIDDEN);
    // A bearer token is not: scripts use it without a cookie.
    let post = Request::post("/api/schedules/nightly/pause")
        .header(header::AUTHORIZATION, "Bearer t0ken")
        .body(Body::empty())
        .unwrap();
    let r = send(&app, post).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        db.scalar::<String>(
            "SELECT CAST(state AS CHAR) FROM jobq_schedules WHERE name = 'nightly'"
        )
        .await,
        "paused"
    );
    let actor: String = db
        .scalar("SELECT CAST(actor AS CHAR) FROM jobq_audit")
        .await;
    assert_eq!(actor, "token");
    let post = Request::post("/api/jobs/1/explode")
        .header(header::AUTHORIZATION, "Bearer t0ken")
        .body(Body::empty())
        .unwrap();
    let r = send(&app, post).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("explode"));
}

#[tokio::test]
async fn under_a_prefix_every_link_and_the_cookie_carry_it() {
    let db = seeded().await;
    let app = app(
        &db,
        WebConfig {
            prefix: "/ops/jobq".into(),
            ..Default::default()
        },
    );
    let r = get(&app, "/ops/jobq").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("href=\"/ops/jobq\""), "home link");
    let slash = get(&app, "/ops/jobq/").await;
    assert_eq!(slash.status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(slash.headers[header::LOCATION], "/ops/jobq");
    assert!(r.body.contains("href=\"/ops/jobq/jobs\""));
    assert!(r.body.contains("href=\"/ops/jobq/assets/app.css\""));
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("Path=/ops/jobq"), "{cookie}");
    assert_eq!(get(&app, "/jobs").await.status, StatusCode::NOT_FOUND);
    assert_eq!(get(&app, "/ops/jobq/jobs/1").await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_bulk_action_on_a_filter_confirms_the_count_and_acts_on_what_matches_then() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/jobs?state=dead").await;
    let page = get(&app, "/jobs?state=dead").await;
    assert!(page.body.contains("id=\"bulk-filter\""));
    assert!(
        page.body
            .contains("Every job matching state=&quot;dead&quot;")
    );

    let ask = "scope=filter&action=retry&state=dead&queue=&kind=&error=boom";
    let r = send(&app, form_post("/jobs/bulk", &token, ask)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.body
            .contains("Retry all 5 jobs matching state=&quot;dead&quot; error=&quot;boom&quot;?"),
        "{}",
        r.body
    );
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'dead'")
            .await,
        5
    );
    // Between the question and the answer one more job dies: the filter is read again.
    db.exec("UPDATE job_queue SET state = 'dead', last_error = 'boom' WHERE id = 100")
        .await;
    let r = send(
        &app,
        form_post("/jobs/bulk", &token, &format!("{ask}&confirm=yes")),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let to = r.headers[header::LOCATION].to_str().unwrap().to_string();
    assert!(
        to.starts_with("/jobs?state=dead&error=boom&notice="),
        "{to}"
    );
    assert!(to.contains("6+of+6"), "{to}");
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'dead'")
            .await,
        0
    );
    let audit: (String, String, u64) = sqlx::query_as(
        "SELECT CAST(action AS CHAR), CAST(target AS CHAR), affected FROM jobq_audit",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        audit,
        (
            "jobs.retry".into(),
            "filter state=\"dead\" error=\"boom\"".into(),
            6
        )
    );
    // Nothing matches now: nothing to confirm.
    let r = send(&app, form_post("/jobs/bulk", &token, ask)).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(
        r.headers[header::LOCATION]
            .to_str()
            .unwrap()
            .contains("no+jobs+match")
    );
}

#[tokio::test]
async fn the_overview_counts_each_queues_jobs_by_state() {
    let db = seeded().await;
    db.exec("INSERT INTO job_queue (queue, kind, state, finished_at) VALUES ('mail', 'send', 'dead', NOW(6))")
        .await;
    db.exec("INSERT INTO job_queue (queue, kind) VALUES ('mail', 'send'), ('mail', 'send')")
        .await;
    let app = app(&db, WebConfig::default());
    let page = get(&app, "/").await;
    assert_eq!(page.status, StatusCode::OK);
    let row = |queue: &str| -> String {
        let from = page
            .body
            .find(&format!("<tr data-queue=\"{queue}\">"))
            .unwrap_or_else(|| panic!("no line for {queue}: {}", page.body));
        let rest = &page.body[from..];
        rest[..rest.find("</tr>").unwrap()].to_string()
    };
    let cell = |line: &str, state: &str| -> String {
        let from = line.find(&format!("data-state=\"{state}\"")).unwrap();
        let cell = &line[from..from + line[from..].find("</a>").unwrap()];
        cell[cell.rfind('>').unwrap() + 1..].to_string()
    };
    let default = row("default");
    assert_eq!(cell(&default, "queued"), "60", "{default}");
    assert_eq!(cell(&default, "done"), "55");
    assert_eq!(cell(&default, "dead"), "5");
    let mail = row("mail");
    assert_eq!(cell(&mail, "queued"), "2", "{mail}");
    assert_eq!(cell(&mail, "dead"), "1");
    assert_eq!(cell(&mail, "running"), "0");
    assert!(mail.contains("/jobs?queue=mail&amp;state=dead"), "{mail}");

    let o = json(&get(&app, "/api/overview").await);
    let mail_dead = o["queue_states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["queue"] == "mail" && c["state"] == "dead")
        .unwrap();
    assert_eq!(mail_dead["count"], 1);
    assert_eq!(mail_dead["capped"], false);
}

/// Past 10,000 rows in a state, per-queue counts stay exact for the backlog (queued, retry, running)
/// and say they are a lower bound for the history: a queue with 671 due jobs beside a big one shows
/// 671 queued, not 0.
#[tokio::test]
async fn per_queue_counts_are_exact_for_the_backlog_or_say_they_are_not() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue, kind) SELECT 'big', 'k' FROM seq_1_to_10500")
        .await;
    db.exec("INSERT INTO job_queue (queue, kind) SELECT 'default', 'k' FROM seq_1_to_671")
        .await;
    db.exec(
        "INSERT INTO job_queue (queue, kind, state, run_at) \
         SELECT 'default', 'k', 'retry', NOW(6) + INTERVAL 1 HOUR FROM seq_1_to_3",
    )
    .await;
    db.exec(
        "INSERT INTO job_queue (queue, kind, state, finished_at) \
         SELECT 'big', 'k', 'done', NOW(6) FROM seq_1_to_10005",
    )
    .await;
    db.exec("ANALYZE TABLE job_queue").await;
    let app = app(&db, WebConfig::default());
    let o = json(&get(&app, "/api/overview").await);
    let count = |queue: &str, state: &str| {
        o["queue_states"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["queue"] == queue && c["state"] == state)
            .map(|c| (c["count"].as_i64().unwrap(), c["capped"].as_bool().unwrap()))
    };
    assert_eq!(count("default", "queued"), Some((671, false)), "{o}");
    assert_eq!(count("default", "retry"), Some((3, false)), "{o}");
    assert_eq!(count("big", "queued"), Some((10_500, false)), "{o}");
    assert_eq!(count("big", "done"), Some((10_000, true)), "{o}");
    let page = get(&app, "/").await.body;
    assert!(
        page.contains("data-state=\"done\"") && page.contains(">10000+</a>"),
        "a capped count is shown as a lower bound"
    );
}

/// No index holds done rows apart (schema 41): they are counted among the newest 20,000 ids, exact
/// when those are the whole table and a lower bound, said so, when the table holds older rows.
#[tokio::test]
async fn done_jobs_are_counted_among_the_newest_ids_and_marked_when_older_rows_exist() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (queue, kind, state, finished_at) \
         SELECT 'old', 'k', 'done', NOW(6) FROM seq_1_to_20",
    )
    .await;
    let done = |o: &serde_json::Value| {
        let all = o["states"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["state"] == "done")
            .map(|c| (c["count"].as_i64().unwrap(), c["capped"].as_bool().unwrap()));
        let queue = o["queue_states"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["queue"] == "old" && c["state"] == "done")
            .map(|c| (c["count"].as_i64().unwrap(), c["capped"].as_bool().unwrap()));
        (all, queue)
    };
    let o = json(&get(&app(&db, WebConfig::default()), "/api/overview").await);
    assert_eq!(done(&o), (Some((20, false)), Some((20, false))), "{o}");
    // 20,000 newer jobs push the done rows out of the window: none seen, and the count says so.
    db.exec("INSERT INTO job_queue (kind) SELECT 'k' FROM seq_1_to_20000")
        .await;
    let o = json(&get(&app(&db, WebConfig::default()), "/api/overview").await);
    assert_eq!(done(&o).0, Some((0, true)), "{o}");
    // A done job among the newest ids is seen.
    db.exec("UPDATE job_queue SET state = 'done', finished_at = NOW(6) ORDER BY id DESC LIMIT 1")
        .await;
    let o = json(&get(&app(&db, WebConfig::default()), "/api/overview").await);
    assert_eq!(done(&o).0, Some((1, true)), "{o}");
}

#[tokio::test]
async fn cancelling_a_job_from_its_page_asks_first() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/").await;
    let page = get(&app, "/jobs/100").await;
    assert!(
        page.body.contains("data-action=\"cancel\""),
        "{}",
        page.body
    );
    let r = send(&app, form_post("/jobs/100/cancel", &token, "")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("Cancel job 100?"), "{}", r.body);
    assert!(r.body.contains("name=\"confirm\" value=\"yes\""));
    assert!(
        r.body.contains("href=\"/jobs/100\""),
        "no leads back to the job"
    );
    assert_eq!(
        state(&db, 100).await,
        "queued",
        "nothing happens before the confirmation"
    );
    let r = send(&app, form_post("/jobs/100/cancel", &token, "confirm=yes")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(state(&db, 100).await, "cancelled");
    // Retry and run now need no confirmation: they make a job run, as it was meant to.
    let r = send(&app, form_post("/jobs/100/retry", &token, "")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(state(&db, 100).await, "queued");
}

#[tokio::test]
async fn the_api_lists_schedules_processes_and_the_audit_trail_and_acts_on_jobs() {
    let db = seeded().await;
    jobq::Schedules::new(db.pool.clone())
        .create(&jobq::ScheduleDef::new("nightly", "report", "0 3 * * *"))
        .await
        .unwrap();
    db.exec(
        "INSERT INTO jobq_processes (token, role, host, pid, connection_id, server_id, server_epoch, \
         version) VALUES ('w1:42:7:1-1:00ff', 'worker', 'w1', 42, 7, 1, 1, '0.1.0')",
    )
    .await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/").await;

    let list = json(&get(&app, "/api/schedules").await);
    assert_eq!(list[0]["name"], "nightly", "{list}");
    assert_eq!(list[0]["state"], "enabled");
    let one = json(&get(&app, "/api/schedules/nightly").await);
    assert_eq!(one["schedule"]["spec"], "0 3 * * *", "{one}");
    assert_eq!(one["next"].as_array().unwrap().len(), 5);
    assert!(one["runs"].as_array().unwrap().is_empty());
    let missing = get(&app, "/api/schedules/nope").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    let procs = json(&get(&app, "/api/processes").await);
    assert_eq!(procs[0]["process"]["host"], "w1", "{procs}");
    assert_eq!(procs[0]["process"]["pid"], 42);
    assert_eq!(procs[0]["running_jobs"], 0);

    let r = send(&app, api_post("/api/jobs/1/retry", &token, "")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(json(&r)["ok"], true);
    assert_eq!(state(&db, 1).await, "queued");
    let r = send(&app, api_post("/api/jobs/1/retry", &token, "")).await;
    assert_eq!(
        r.status,
        StatusCode::CONFLICT,
        "a queued job is not retried: {}",
        r.body
    );

    let audit = json(&get(&app, "/api/audit").await);
    assert_eq!(audit.as_array().unwrap().len(), 1, "{audit}");
    assert_eq!(audit[0]["action"], "job.retry");
    assert_eq!(audit[0]["target"], "1");
    assert_eq!(audit[0]["affected"], 1);
}

#[tokio::test]
async fn the_bulk_api_acts_on_ids_or_on_a_filter_and_is_guarded_like_every_post() {
    let db = seeded().await;
    db.exec("INSERT INTO job_queue (queue, kind) VALUES ('mail', 'send'), ('mail', 'send')")
        .await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/").await;

    let r = send(
        &app,
        api_post(
            "/api/jobs/bulk",
            &token,
            r#"{"action": "retry", "ids": [1, 2, 100]}"#,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let v = json(&r);
    assert_eq!(
        (v["matched"].as_i64(), v["changed"].as_i64()),
        (Some(3), Some(2)),
        "{v}"
    );
    assert_eq!(v["refused"], 1, "job 100 is queued: {v}");
    assert!(v["first_refusal"].as_str().unwrap().contains("100"), "{v}");
    assert_eq!(state(&db, 1).await, "queued");

    let r = send(
        &app,
        api_post(
            "/api/jobs/bulk",
            &token,
            r#"{"action": "cancel", "filter": {"queue": "mail", "state": "queued"}}"#,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(json(&r)["changed"], 2);
    let cancelled: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE queue = 'mail' AND state = 'cancelled'")
        .await;
    assert_eq!(cancelled, 2);
    let target: String = db
        .scalar("SELECT CAST(target AS CHAR) FROM jobq_audit WHERE action = 'jobs.cancel'")
        .await;
    assert!(target.contains("queue=\"mail\""), "{target}");

    for bad in [
        r#"{"action": "retry"}"#,
        r#"{"action": "retry", "ids": [1], "filter": {}}"#,
        r#"{"action": "explode", "ids": [1]}"#,
        r#"{"action": "retry", "ids": [1], "extra": 1}"#,
        "not json",
    ] {
        let r = send(&app, api_post("/api/jobs/bulk", &token, bad)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.body);
        assert!(json(&r)["error"].is_string());
    }
    // Without the CSRF token, or in read-only mode, nothing is changed.
    let mut bare = api_post(
        "/api/jobs/bulk",
        &token,
        r#"{"action": "delete", "ids": [1]}"#,
    );
    bare.headers_mut().remove("x-csrf-token");
    assert_eq!(send(&app, bare).await.status, StatusCode::FORBIDDEN);
    let ro = self::app(
        &db,
        WebConfig {
            read_only: true,
            ..Default::default()
        },
    );
    let token = csrf(&ro, "/").await;
    let r = send(
        &ro,
        api_post(
            "/api/jobs/bulk",
            &token,
            r#"{"action": "delete", "ids": [1]}"#,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(state(&db, 1).await, "queued");
}

/// A misspelt or unknown key anywhere in a bulk request, a filter that names nothing, or more matches
/// than the request's `limit`: each is refused with a JSON 400 naming what is wrong, and no job is
/// touched. Every job is taken only when the request says `"all": true`.
#[tokio::test]
async fn a_bulk_request_takes_only_the_jobs_it_names_and_every_job_only_when_it_says_all() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/").await;
    let before = db.states().await;
    for (bad, names) in [
        (
            r#"{"action": "delete", "filter": {"stat": "dead"}}"#,
            "stat",
        ),
        (
            r#"{"action": "retry", "filter": {"state": "done", "limit": 5}}"#,
            "limit",
        ),
        (r#"{"action": "delete", "filter": {}}"#, "all"),
        (r#"{"action": "delete"}"#, "all"),
        (r#"{"action": "delete", "filter": {"state": ""}}"#, "all"),
        (
            r#"{"action": "delete", "all": true, "filter": {"state": "dead"}}"#,
            "drop one",
        ),
        (
            r#"{"action": "retry", "filter": {"state": "done"}, "limit": 5}"#,
            "more than 5 jobs match",
        ),
        (
            r#"{"action": "retry", "ids": [1, 2, 3], "limit": 2}"#,
            "at most 2",
        ),
        (
            r#"{"action": "retry", "filter": {"state": "done"}, "limit": 0}"#,
            "limit of 0",
        ),
    ] {
        let r = send(&app, api_post("/api/jobs/bulk", &token, bad)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.body);
        let error = json(&r)["error"].as_str().unwrap().to_string();
        assert!(error.contains(names), "{bad}: {error}");
        assert_eq!(db.states().await, before, "{bad} changed jobs");
    }
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_audit").await,
        0,
        "a refused request is not audited as done"
    );

    // Within its limit the filter acts on exactly what it names.
    let r = send(
        &app,
        api_post(
            "/api/jobs/bulk",
            &token,
            r#"{"action": "retry", "filter": {"state": "dead"}, "limit": 5}"#,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(json(&r)["changed"], 5);
    assert_eq!(db.states().await, "done=55 queued=65");

    // Said on purpose, every job goes (none is running here).
    let r = send(
        &app,
        api_post(
            "/api/jobs/bulk",
            &token,
            r#"{"action": "delete", "all": true}"#,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(json(&r)["changed"], 120);
    let target: String = db
        .scalar("SELECT CAST(target AS CHAR) FROM jobq_audit WHERE action = 'jobs.delete'")
        .await;
    assert_eq!(target, "all jobs");
}

/// The jobs list's query string, on the page and in the API, refuses keys it does not know instead of
/// ignoring them (which would show every job as if it matched).
#[tokio::test]
async fn an_unknown_key_in_the_jobs_query_string_is_refused_by_name() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let r = get(&app, "/api/jobs?stat=dead").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(
        json(&r)["error"].as_str().unwrap().contains("stat"),
        "{}",
        r.body
    );
    let r = get(&app, "/jobs?stat=dead").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("stat"), "{}", r.body);
    // The other pages take only their notice.
    for page in ["/?stat=dead", "/schedules?x=1", "/jobs/1?x=1"] {
        let r = get(&app, page).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{page}");
    }
    // The known keys still work, `limit` included.
    let r = get(&app, "/api/jobs?state=dead&limit=2").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(json(&r)["jobs"].as_array().unwrap().len(), 2);
}

/// The dashboard's bulk form follows the API's rules: an unknown field is refused by name, an empty
/// filter needs the "every job" box ticked (the page shows it only then), and nothing is changed
/// before the confirmation.
#[tokio::test]
async fn the_bulk_form_refuses_unknown_fields_and_an_empty_filter_without_all() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/jobs").await;
    let before = db.states().await;

    let r = send(
        &app,
        form_post(
            "/jobs/bulk",
            &token,
            "scope=filter&action=delete&stat=dead&confirm=yes",
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("stat"), "{}", r.body);
    let r = send(
        &app,
        form_post(
            "/jobs/bulk",
            &token,
            "scope=filter&action=delete&state=&queue=&kind=&error=&confirm=yes",
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("every job"), "{}", r.body);
    assert_eq!(db.states().await, before);

    // The unfiltered page asks for the box; a filtered one does not.
    assert!(get(&app, "/jobs").await.body.contains("name=\"all\""));
    assert!(
        !get(&app, "/jobs?state=dead")
            .await
            .body
            .contains("name=\"all\"")
    );
    let ask = "scope=filter&action=delete&state=&queue=&kind=&error=&all=yes";
    let r = send(&app, form_post("/jobs/bulk", &token, ask)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        r.body.contains("Delete every job, 120 in all?"),
        "{}",
        r.body
    );
    assert_eq!(db.states().await, before);
    let r = send(
        &app,
        form_post("/jobs/bulk", &token, &format!("{ask}&confirm=yes")),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(db.states().await, "");
}

/// A queue paused from the overview's button stops being claimed, shows as paused with who did it, and
/// resumes through the JSON API; both changes are audited, and a bad action is refused.
#[tokio::test]
async fn queues_pause_and_resume_from_the_overview_and_the_api() {
    let db = seeded().await;
    let app = app(&db, WebConfig::default());
    let token = csrf(&app, "/").await;
    let home = get(&app, "/").await;
    assert!(
        home.body.contains("data-paused=\"no\"") && home.body.contains("/queues/default/pause"),
        "{}",
        home.body
    );
    let r = send(&app, form_post("/queues/default/pause", &token, "")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let paused: i64 = db
        .scalar("SELECT COUNT(*) FROM jobq_queues WHERE name = 'default'")
        .await;
    assert_eq!(paused, 1);
    let home = get(&app, "/").await;
    assert!(
        home.body.contains("data-paused=\"yes\"") && home.body.contains("/queues/default/resume"),
        "{}",
        home.body
    );
    let overview = json(&get(&app, "/api/overview").await);
    assert_eq!(overview["paused"][0]["name"], "default");
    let r = send(&app, api_post("/api/queues/default/resume", &token, "")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(json(&r)["message"].as_str().unwrap().contains("resumed"));
    let left: i64 = db.scalar("SELECT COUNT(*) FROM jobq_queues").await;
    assert_eq!(left, 0);
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(action AS CHAR) FROM jobq_audit WHERE target = 'default' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(actions, ["queue.pause", "queue.resume"]);
    let r = send(&app, api_post("/api/queues/default/explode", &token, "")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
}
