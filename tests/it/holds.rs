//! Holds an operator can see: a change that would hold jobs back as things stand (a limit on a kind
//! nothing serves, a pin or a worker count for a host where no jobq process runs) is made with a
//! warning naming it, and `scale --reset` forgets what its help says.

use crate::common::{TestDb, run_jobq};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A worker on `host` serving `kinds`, registered as a live one would be.
async fn register_worker(db: &TestDb, host: &str, kinds: &str) {
    db.exec(&format!(
        "INSERT INTO jobq_processes (token, role, host, pid, connection_id, server_id, server_epoch, \
         queues, version, kinds) VALUES ('t-{host}', 'worker', '{host}', 1, 1, 1, 1, 'default', 'test', \
         '{kinds}')"
    ))
    .await;
}

#[tokio::test]
async fn changes_that_would_hold_jobs_are_made_with_a_warning_naming_the_cause() {
    let db = TestDb::new().await;
    register_worker(&db, "box-1", "email.send,report").await;

    // A kind a live worker serves: no warning. A misspelt one: stored, and named.
    let out = run_jobq(
        Some(&db.url),
        &["limit", "set", "--kind", "email.send", "5"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = run_jobq(
        Some(&db.url),
        &["limit", "set", "--kind", "emial.send", "5"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "warning: no handler in this config and no live worker serves kind \"emial.send\""
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        db.scalar::<i64>("SELECT COUNT(*) FROM jobq_limits").await,
        2,
        "both limits are stored"
    );

    // A pin to a host where a worker runs: quiet. To one never seen: stored, and named.
    let out = run_jobq(Some(&db.url), &["queue", "pin", "gpu", "--host", "box-1"]);
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = run_jobq(Some(&db.url), &["queue", "pin", "gpu", "--host", "box-2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("warning: no jobq process runs on host \"box-2\" (registered now: box-1)")
            && e.contains("queue gpu is not served there"),
        "{e}"
    );

    let out = run_jobq(Some(&db.url), &["scale", "-n", "2", "--host", "box-9"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no jobq process runs on host \"box-9\""),
        "{}",
        stderr(&out)
    );
}

/// `scale --reset` without `--host` forgets every stored count, the one for every host and each
/// host's, so every supervisor goes back to its own -n as the help says; with `--host` only that
/// host's.
#[tokio::test]
async fn scale_reset_forgets_what_its_help_says() {
    let db = TestDb::new().await;
    for args in [
        vec!["scale", "-n", "3"],
        vec!["scale", "-n", "1", "--host", "a"],
        vec!["scale", "-n", "2", "--host", "b"],
    ] {
        assert!(run_jobq(Some(&db.url), &args).status.success());
    }
    let out = run_jobq(Some(&db.url), &["scale", "--reset", "--host", "a"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        db.scalar::<String>(
            "SELECT CAST(GROUP_CONCAT(host ORDER BY host) AS CHAR) FROM jobq_scale"
        )
        .await,
        ",b"
    );
    let out = run_jobq(Some(&db.url), &["scale", "--reset"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 stored count(s) gone"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(db.scalar::<i64>("SELECT COUNT(*) FROM jobq_scale").await, 0);
    let help = run_jobq(None, &["scale", "--help"]);
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("every stored count"),
        "the help says what --reset forgets"
    );
}

/// `jobq stats` says what holds due jobs, in text and JSON: a limit of 0, a full limit, a pause, a pin
/// to a host where no worker runs, and supervisors scaled to 0.
#[tokio::test]
async fn stats_names_what_holds_due_jobs() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (kind, queue) SELECT 'email.send', 'mail' FROM seq_1_to_49")
        .await;
    db.exec("INSERT INTO job_queue (kind, queue) VALUES ('render', 'gpu'), ('x', 'quiet')")
        .await;
    // A running render job, listed as a claim lists it (a limit counts the listed rows).
    db.exec(
        "INSERT INTO job_queue (id, kind, queue, state, claim) \
         VALUES (1000, 'render', 'gpu', 'running', 't')",
    )
    .await;
    db.exec("INSERT INTO jobq_holdings (holder, held_ids) VALUES ('t', '[1000]')")
        .await;
    register_worker(&db, "box-1", "email.send,render,x").await;
    for args in [
        vec!["limit", "set", "--kind", "email.send", "0"],
        vec!["limit", "set", "--kind", "render", "1"],
        vec!["queue", "pin", "gpu", "--host", "gpu-box"],
        vec!["queue", "pause", "quiet"],
        vec!["scale", "-n", "0", "--host", "box-1"],
    ] {
        assert!(run_jobq(Some(&db.url), &args).status.success(), "{args:?}");
    }
    let out = run_jobq(Some(&db.url), &["stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "held: queue mail: 49 due of kind email.send held by limit kind email.send 0/0",
        "held: queue gpu: 1 due of kind render held by the queue is pinned to gpu-box and no live \
         worker there claims from it; limit kind render 1/1",
        "held: queue quiet: 1 due of kind x held by the queue is paused",
        "held: supervisors of host box-1 keep 0 workers",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    let out = run_jobq(Some(&db.url), &["stats", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let held = v["held"].as_array().unwrap();
    let mail = held.iter().find(|g| g["queue"] == "mail").unwrap();
    assert_eq!(mail["due"], 49);
    assert_eq!(mail["holds"][0]["reason"], "limit");
    assert_eq!(mail["holds"][0]["max_jobs"], 0);
    assert_eq!(v["scale"][0]["workers"], 0);

    // The dashboard's overview says the same, in its page and in /api/overview.
    let app = jobq::web::router(db.pool.clone(), jobq::web::WebConfig::default()).unwrap();
    let page = overview(&app, "/").await;
    assert!(
        page.contains(
            "49 due jobs of kind &quot;email.send&quot; in queue mail: held by limit kind \
         email.send 0/0"
        ),
        "{page}"
    );
    let api: serde_json::Value =
        serde_json::from_str(&overview(&app, "/api/overview").await).unwrap();
    let mail = api["held"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["queue"] == "mail")
        .unwrap();
    assert_eq!(mail["holds"][0]["reason"], "limit");
}

/// The body of a GET sent straight into the dashboard's router.
async fn overview(app: &axum::Router, uri: &str) -> String {
    use tower::ServiceExt;
    let req = axum::http::Request::get(uri)
        .header("host", "127.0.0.1:8080")
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}
