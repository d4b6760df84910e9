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
