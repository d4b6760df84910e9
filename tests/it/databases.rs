//! One config serving several databases: `[databases.NAME]` sections, `--database NAME`, `jobq enable`
//! and `jobq disable`, and `jobq supervise` serving every section with its own workers and handlers,
//! no process of one database touching another's.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{TestDb, jobq, run_jobq, scratch_dir, wait_output, wait_until, write_config};

fn text(out: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A handler for `note` that appends its payload to `file`, one line per job (one `echo`, one
/// append: lines of concurrent jobs do not interleave).
fn note_handler(section: &str, file: &std::path::Path) -> String {
    format!(
        "[databases.{section}.handlers.note]\ncommand = [\"sh\", \"-c\", \"p=$(cat); echo \\\"$p\\\" >> {}\"]\n",
        file.display()
    )
}

#[tokio::test]
async fn one_supervisor_serves_each_database_with_its_own_workers_and_handlers() {
    let a = TestDb::new().await;
    let b = TestDb::unmigrated().await;
    let dir = scratch_dir();
    let (a_log, b_log) = (dir.join("a.log"), dir.join("b.log"));
    let cfg = write_config(
        &dir,
        &format!(
            "workers = 2\n[worker]\npoll_interval = \"200ms\"\n\
             [databases.a]\ndatabase_url = \"{}\"\nworkers = 1\n{}\
             [databases.b]\ndatabase_url = \"{}\"\n{}\
             [databases.b.schedules.tick]\nspec = \"every 1s\"\nkind = \"tick\"\n",
            a.url,
            note_handler("a", &a_log),
            b.url,
            note_handler("b", &b_log)
        ),
    );
    let cfg_arg = cfg.to_str().unwrap();
    // b is enabled through the CLI; a was migrated by the test set-up.
    let out = run_jobq(None, &["--config", cfg_arg, "enable", "b"]);
    assert!(out.status.success(), "{}", text(&out));
    for (db, name) in [(&a, "a"), (&b, "b")] {
        db.exec(&format!(
            "INSERT INTO job_queue (kind, payload) \
             SELECT 'note', JSON_OBJECT('db', '{name}', 'n', seq) FROM seq_1_to_20"
        ))
        .await;
    }
    let sup = jobq(
        None,
        &["supervise", "--config", cfg_arg, "--reaper", "--scheduler"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    for db in [&a, &b] {
        wait_until("every job done", Duration::from_secs(30), || async {
            db.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE state = 'done'")
                .await
                == 20
        })
        .await;
    }
    // Each database's workers, by its section's count (b's from the top level), registered in it alone:
    // every registered session is a connection to that database, and no pid works for both.
    let mut pids = Vec::new();
    for (db, want) in [(&a, 1), (&b, 2)] {
        wait_until("workers registered", Duration::from_secs(10), || async {
            db.scalar::<i64>("SELECT COUNT(*) FROM jobq_processes WHERE role = 'worker'")
                .await
                == want
        })
        .await;
        let elsewhere: i64 = db
            .scalar(&format!(
                "SELECT COUNT(*) FROM jobq_processes p \
                 JOIN information_schema.processlist l ON l.id = p.connection_id \
                 WHERE p.role = 'worker' AND l.db <> '{}'",
                db.name
            ))
            .await;
        assert_eq!(elsewhere, 0, "a worker of {} connected elsewhere", db.name);
        let mine: Vec<u32> =
            sqlx::query_scalar("SELECT pid FROM jobq_processes WHERE role = 'worker' ORDER BY pid")
                .fetch_all(&db.pool)
                .await
                .unwrap();
        pids.push(mine);
    }
    assert!(pids[0].iter().all(|p| !pids[1].contains(p)), "{pids:?}");
    // b's schedule makes jobs in b only (no handler serves them: they wait, queued).
    wait_until("a scheduled job in b", Duration::from_secs(10), || async {
        b.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE kind = 'tick'")
            .await
            > 0
    })
    .await;
    for (db, want) in [(&a, 0), (&b, 1)] {
        let schedules: i64 = db.scalar("SELECT COUNT(*) FROM jobq_schedules").await;
        assert_eq!(schedules, want, "{}", db.name);
    }
    assert_eq!(
        a.scalar::<i64>("SELECT COUNT(*) FROM job_queue WHERE kind = 'tick'")
            .await,
        0
    );
    // Each job ran under its own database's handler.
    for (log, name) in [(&a_log, "a"), (&b_log, "b")] {
        let lines = std::fs::read_to_string(log).unwrap();
        let lines: Vec<&str> = lines.lines().collect();
        assert_eq!(lines.len(), 20, "{name}: {lines:?}");
        assert!(
            lines
                .iter()
                .all(|l| l.contains(&format!("\"db\": \"{name}\""))
                    || l.contains(&format!("\"db\":\"{name}\""))),
            "{name}: {lines:?}"
        );
    }
    kill(Pid::from_raw(sup.id() as i32), Signal::SIGTERM).unwrap();
    let out = wait_output(sup, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("supervising several databases"), "{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
}

#[tokio::test]
async fn enable_creates_and_migrates_and_disable_removes_only_jobqs_objects() {
    let db = TestDb::unmigrated().await;
    // The section's database does not exist yet: enable creates it.
    db.exec(&format!("DROP DATABASE `{}`", db.name)).await;
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        &format!("[databases.x]\ndatabase_url = \"{}\"\n", db.url),
    );
    let c = cfg.to_str().unwrap();
    let out = run_jobq(None, &["--config", c, "enable", "x"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("created database"), "{stdout}");
    assert!(stdout.contains("jobq is enabled in x"), "{stdout}");
    let out = run_jobq(None, &["--config", c, "enable", "x"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already current"),
        "{}",
        text(&out)
    );
    // An application table that shares the prefix is not jobq's.
    // (Named in full: the pool's sessions lost their database when it was dropped.)
    db.exec(&format!(
        "CREATE TABLE `{}`.jobq_app_orders (id INT PRIMARY KEY)",
        db.name
    ))
    .await;
    // --database picks the section for any command.
    let out = run_jobq(None, &["--config", c, "--database", "x", "enqueue", "k"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run_jobq(None, &["--config", c, "disable", "x"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 unfinished job(s)"), "{stderr}");
    assert!(stderr.contains("or force it"), "{stderr}");
    let tables: i64 = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{}'",
            db.name
        ))
        .await;
    assert!(tables > 10, "refused, so nothing dropped: {tables}");

    let out = run_jobq(None, &["--config", c, "disable", "x", "--force"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("dropped jobq_jobs"),
        "{}",
        text(&out)
    );
    let left: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables WHERE table_schema = '{0}' \
         UNION ALL SELECT CAST(routine_name AS CHAR) FROM information_schema.routines \
         WHERE routine_schema = '{0}'",
        db.name
    ))
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(left, vec!["jobq_app_orders".to_string()]);
    let out = run_jobq(None, &["--config", c, "disable", "x"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("was not installed"),
        "{}",
        text(&out)
    );
    // And back: enable installs it again on the same database.
    let out = run_jobq(None, &["--config", c, "enable", "x"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[tokio::test]
async fn a_config_of_several_databases_asks_which_and_names_unknown_sections() {
    let (a, b) = (TestDb::new().await, TestDb::new().await);
    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        &format!(
            "[databases.a]\ndatabase_url = \"{}\"\n[databases.b]\ndatabase_url = \"{}\"\n",
            a.url, b.url
        ),
    );
    let c = cfg.to_str().unwrap();
    // `stats` shows every database in turn; other commands ask which.
    let out = run_jobq(None, &["--config", c, "stats"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("== database a (") && stdout.contains("== database b ("),
        "{stdout}"
    );
    let out = run_jobq(None, &["--config", c, "stats", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        all["a"]["counts"].is_array() && all["b"]["counts"].is_array(),
        "{all}"
    );
    let out = run_jobq(None, &["--config", c, "jobs", "list"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the config serves several databases (a, b): pass --database NAME"),
        "{}",
        text(&out)
    );
    let out = run_jobq(None, &["--config", c, "--database", "c", "stats"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no [databases.c] section; it has a, b"),
        "{}",
        text(&out)
    );
    // The section's URL wins over one in the environment, which names no section.
    let out = run_jobq(
        Some(&a.url),
        &["--config", c, "--database", "b", "enqueue", "k"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(b.scalar::<i64>("SELECT COUNT(*) FROM job_queue").await, 1);
    assert_eq!(a.scalar::<i64>("SELECT COUNT(*) FROM job_queue").await, 0);
    // A supervisor of several databases checks every section before it starts any.
    let out = run_jobq(None, &["--config", c, "supervise"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("databases.a: the config defines no handlers"),
        "{}",
        text(&out)
    );
}

/// A supervisor of several databases reaches every section's database and checks its schema before it
/// starts any: a database that does not exist and one without jobq are both named, once each, and the
/// good section's workers never start.
#[tokio::test]
async fn supervise_checks_every_database_before_it_starts_any() {
    let good = TestDb::new().await;
    let bare = TestDb::unmigrated().await;
    let dir = scratch_dir();
    let log = dir.join("good.log");
    let missing = good.url.rsplit_once('/').unwrap().0.to_string() + "/jobq_no_such_database";
    let cfg = write_config(
        &dir,
        &format!(
            "[databases.good]\ndatabase_url = \"{}\"\n{}\
             [databases.missing]\ndatabase_url = \"{missing}\"\n{}\
             [databases.bare]\ndatabase_url = \"{}\"\n{}",
            good.url,
            note_handler("good", &log),
            note_handler("missing", &log),
            bare.url,
            note_handler("bare", &log),
        ),
    );
    let child = jobq(None, &["supervise", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("2 of 3 databases cannot be served, so none was started"),
        "{}",
        text(&out)
    );
    assert_eq!(
        stderr.matches("databases.missing:").count(),
        1,
        "{}",
        text(&out)
    );
    assert!(stderr.contains("jobq_no_such_database"), "{}", text(&out));
    assert!(
        stderr.contains("databases.bare:") && stderr.contains("run `jobq enable bare`"),
        "{}",
        text(&out)
    );
    assert!(!stderr.contains("databases.good:"), "{}", text(&out));
    let registered: i64 = good.scalar("SELECT COUNT(*) FROM jobq_processes").await;
    assert_eq!(registered, 0, "no worker of the good database started");
}
