//! Least privilege: the grants the README documents for an enqueue-only application, for workers and
//! reapers, and (implicitly, as the tests' root) for the admin who migrates.

use std::process::{Output, Stdio};
use std::time::Duration;

use sqlx::Connection;

use crate::common::{TestDb, jobq, scratch_dir, wait_output, write_config};

/// Users created for one test on every host a TCP login from this machine may match, dropped on drop.
pub struct Users<'a> {
    db: &'a TestDb,
    names: Vec<String>,
}

const HOSTS: [&str; 3] = ["127.0.0.1", "localhost", "%"];
const PASSWORD: &str = "grants-test-pw";

impl<'a> Users<'a> {
    pub fn new(db: &'a TestDb) -> Self {
        Self {
            db,
            names: Vec::new(),
        }
    }

    /// Creates `role_<random>` with `grants` (each with `{db}` for the database name) and returns the URL
    /// it logs in with.
    pub async fn create(&mut self, role: &str, grants: &[&str]) -> String {
        let name = format!("jq_{role}_{}", rand::random::<u32>());
        for host in HOSTS {
            self.db
                .exec(&format!(
                    "CREATE USER '{name}'@'{host}' IDENTIFIED BY '{PASSWORD}'"
                ))
                .await;
            for g in grants {
                let g = g.replace("{db}", &format!("`{}`", self.db.name));
                self.db
                    .exec(&format!("GRANT {g} TO '{name}'@'{host}'"))
                    .await;
            }
        }
        self.names.push(name.clone());
        let (_, rest) = self.db.url.split_once("://").unwrap();
        let (_, host) = rest.rsplit_once('@').unwrap();
        format!("mysql://{name}:{PASSWORD}@{host}")
    }
}

impl Drop for Users<'_> {
    /// Users are server-wide, not in the test's database: drop them even when the test fails.
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.names);
        let url = self.db.url.clone();
        // Drop is synchronous: run the statements on a runtime of its own in a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let Ok(mut conn) = sqlx::MySqlConnection::connect(&url).await else {
                    return;
                };
                for name in &names {
                    for host in HOSTS {
                        let _ = sqlx::query(&format!("DROP USER IF EXISTS '{name}'@'{host}'"))
                            .execute(&mut conn)
                            .await;
                    }
                }
                let _ = conn.close().await;
            });
        })
        .join();
    }
}

fn run(url: &str, args: &[&str]) -> Output {
    let child = jobq(Some(url), args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(60))
}

#[track_caller]
fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The server error number of a failed statement.
fn error_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .map(|m| m.number())
}

/// ER_TABLEACCESS_DENIED_ERROR: "command denied to user".
const TABLE_ACCESS_DENIED: u16 = 1142;

#[tokio::test]
async fn the_documented_grants_are_enough_for_each_role_and_no_more() {
    let db = TestDb::new().await;
    let mut users = Users::new(&db);

    // An application that only enqueues.
    let app = users.create("app", &["INSERT ON {db}.job_queue"]).await;
    let mut conn = sqlx::MySqlConnection::connect(&app).await.unwrap();
    sqlx::query("INSERT INTO job_queue (kind, payload) VALUES ('k', '{\"n\": 1}'), ('k', '{}')")
        .execute(&mut conn)
        .await
        .expect("the application can enqueue");
    let e = sqlx::query("UPDATE job_queue SET priority = -1")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(error_number(&e), Some(TABLE_ACCESS_DENIED), "{e}");
    let e = sqlx::query("DELETE FROM job_queue")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(error_number(&e), Some(TABLE_ACCESS_DENIED), "{e}");
    conn.close().await.unwrap();
    // `jobq enqueue` also checks the schema version first: that takes SELECT on the migrations table.
    let out = run(&app, &["enqueue", "k"]);
    assert!(
        !out.status.success(),
        "enqueue without SELECT on the migrations table"
    );
    let app_cli = users
        .create(
            "app",
            &[
                "INSERT ON {db}.job_queue",
                "SELECT ON {db}.jobq_schema_migrations",
            ],
        )
        .await;
    assert_ok(
        &run(&app_cli, &["enqueue", "k"]),
        "jobq enqueue with the documented grants",
    );
    db.exec(
        "DELETE FROM job_queue WHERE id = (SELECT MAX(id) FROM (SELECT id FROM job_queue) AS t)",
    )
    .await;

    // An application that finishes its own jobs (handed their claim by an HTTP or process handler):
    // EXECUTE on the procedure alone, which runs with its definer's rights and changes only the row
    // whose claim it names.
    let app_finish = users
        .create(
            "app",
            &[
                "INSERT ON {db}.job_queue",
                "EXECUTE ON PROCEDURE {db}.jobq_finish",
            ],
        )
        .await;
    db.exec(
        "INSERT INTO job_queue (kind, state, claim, attempts) VALUES ('k', 'running', 'tok', 1)",
    )
    .await;
    let mut conn = sqlx::MySqlConnection::connect(&app_finish).await.unwrap();
    let id: u64 = db.scalar("SELECT MAX(id) FROM job_queue").await;
    for (claim, want) in [("not-tok", 0), ("tok", 1), ("tok", 0)] {
        let (finished,): (i64,) = sqlx::query_as("CALL jobq_finish(?, ?, 1)")
            .bind(id)
            .bind(claim)
            .fetch_one(&mut conn)
            .await
            .expect("the application can call jobq_finish");
        assert_eq!(finished, want, "claim {claim}");
    }
    let e = sqlx::query("UPDATE job_queue SET priority = -1")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(error_number(&e), Some(TABLE_ACCESS_DENIED), "{e}");
    conn.close().await.unwrap();
    db.exec(&format!("DELETE FROM job_queue WHERE id = {id}"))
        .await;

    // Workers and reapers: DML and the wait procedure, no DDL, no PROCESS.
    let worker = users
        .create(
            "worker",
            &["SELECT, INSERT, UPDATE, DELETE, EXECUTE ON {db}.*"],
        )
        .await;
    let dir = scratch_dir();
    let config = write_config(&dir, "[handlers.k]\ncommand = [\"true\"]\n");
    let out = run(&worker, &["worker", "--config", config.to_str().unwrap()]);
    assert_ok(&out, "a drain worker with the worker grants");
    assert_eq!(db.states().await, "done=2");

    // A forever worker, so its registry row and idle wait (the procedure) are exercised, then the reaper.
    let mut child = jobq(
        Some(&worker),
        &["worker", "--forever", "--config", config.to_str().unwrap()],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    db.exec("INSERT INTO job_queue (kind) VALUES ('k')").await;
    crate::common::wait_until(
        "the forever worker's job",
        Duration::from_secs(30),
        || async { db.states().await == "done=3" },
    )
    .await;
    let out = run(&worker, &["reaper", "--once"]);
    assert_ok(&out, "jobq reaper --once with the worker grants");
    let out = run(&worker, &["stats"]);
    assert_ok(&out, "jobq stats with the worker grants");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");

    // No DDL for them.
    let mut conn = sqlx::MySqlConnection::connect(&worker).await.unwrap();
    let e = sqlx::query("CREATE TABLE jobq_not_allowed (a INT)")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(error_number(&e), Some(TABLE_ACCESS_DENIED), "{e}");
    conn.close().await.unwrap();

    // Only this test's users: another test's may exist meanwhile.
    let mine = users
        .names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(",");
    drop(users);
    let left: i64 = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM mysql.user WHERE User IN ({mine})"
        ))
        .await;
    assert_eq!(left, 0, "the test's users are dropped");
    std::fs::remove_dir_all(&dir).ok();
}

/// Schemas 35 to 37 replace `jobq_finish`, `jobq_progress` and `jobq_output` in place (CREATE OR
/// REPLACE, so that MariaDB no longer checks the payload in them): an application granted only
/// EXECUTE on them before the upgrade may still call them after it.
#[tokio::test]
async fn replacing_the_procedures_keeps_the_grants_on_them() {
    let db = TestDb::new().await;
    let mut users = Users::new(&db);
    let url = users
        .create(
            "app",
            &[
                "EXECUTE ON PROCEDURE {db}.jobq_finish",
                "EXECUTE ON PROCEDURE {db}.jobq_progress",
                "EXECUTE ON PROCEDURE {db}.jobq_output",
            ],
        )
        .await;
    db.exec("DELETE FROM jobq_schema_migrations WHERE version IN (35, 36, 37)")
        .await;
    let again = ::jobq::migrate(&db.pool).await.unwrap();
    assert_eq!(again.applied, [35, 36, 37]);
    db.exec(
        "INSERT INTO job_queue (kind, state, claim, attempts) VALUES ('sql', 'running', 'c1', 1)",
    )
    .await;
    let id: u64 = db.scalar("SELECT MAX(id) FROM job_queue").await;
    let mut app = sqlx::MySqlConnection::connect(&url).await.unwrap();
    for call in [
        format!("CALL jobq_progress({id}, 'c1', 1, 50, NULL)"),
        format!(r#"CALL jobq_output({id}, 'c1', 1, '{{"n": 1}}')"#),
        format!("CALL jobq_finish({id}, 'c1', 1)"),
    ] {
        let changed: i64 = sqlx::query_scalar(&call)
            .fetch_one(&mut app)
            .await
            .unwrap_or_else(|e| panic!("{call}: {e}"));
        assert_eq!(changed, 1, "{call}");
    }
    let state: String = db
        .scalar(&format!(
            "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = {id}"
        ))
        .await;
    assert_eq!(state, "done");
}
