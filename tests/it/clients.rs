//! The enqueue examples of `clients/<language>/enqueue.*` (Python with PyMySQL, Node.js with mysql2, PHP
//! with PDO MySQL, Ruby with mysql2) write the rows `jobq enqueue` writes.
//!
//! For each language, one document of steps (a plain job, one with every option, a unique job enqueued
//! twice, a job waiting for two others, a batch of three with a callback) is enqueued by the client in
//! one transaction, then the client's own example (an order and its jobs), logged in as a user holding
//! only the grants docs/clients.md lists. The same steps are replayed with `jobq enqueue` in a second
//! database. The two databases must then hold the same jobs, column by column (every column of
//! `job_queue` but the id, `created_at` and `run_at`; ids as positions, `run_at` as its distance from
//! `created_at`, payloads as JSON values) and the same `jobq_job_deps` rows, and the clients must print
//! the ids `jobq enqueue` printed. A document the client rolls back leaves nothing behind.
//!
//! A language is skipped (SKIPPED on stderr) only when its interpreter or driver is missing and its
//! `JOBQ_PYTHON`, `JOBQ_NODE`, `JOBQ_PHP` or `JOBQ_RUBY` is unset; `scripts/test.sh` sets all four
//! (`scripts/ensure-languages.sh`). docs/clients.md shows the files' enqueue functions: each of its code
//! blocks must be a region of the file, as it is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::Row;

use crate::common::{TestDb, run_jobq, wait_output};
use crate::grants::Users;

/// A language's client: its interpreter (from `env`, else `default` if it loads the driver) and script.
struct Client {
    name: &'static str,
    env: &'static str,
    default: &'static str,
    /// Arguments that make the interpreter load the driver (exit 0 when it is there).
    probe: &'static [&'static str],
    script: &'static str,
    /// The info string of the docs' code blocks for this language.
    fence: &'static str,
}

const PYTHON: Client = Client {
    name: "Python",
    env: "JOBQ_PYTHON",
    default: "/usr/bin/python3",
    probe: &["-c", "import pymysql"],
    script: "clients/python/enqueue.py",
    fence: "python",
};
const NODE: Client = Client {
    name: "Node.js",
    env: "JOBQ_NODE",
    default: "/usr/bin/node",
    probe: &["-e", "require('./clients/node/node_modules/mysql2')"],
    script: "clients/node/enqueue.js",
    fence: "js",
};
const PHP: Client = Client {
    name: "PHP",
    env: "JOBQ_PHP",
    default: "/usr/bin/php",
    probe: &["-r", "exit(extension_loaded('pdo_mysql') ? 0 : 1);"],
    script: "clients/php/enqueue.php",
    fence: "php",
};
const RUBY: Client = Client {
    name: "Ruby",
    env: "JOBQ_RUBY",
    default: "/usr/bin/ruby",
    probe: &["-e", "require 'mysql2'"],
    script: "clients/ruby/enqueue.rb",
    fence: "ruby",
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Client {
    /// The interpreter to run, or None (after saying SKIPPED) when it or its driver is missing and the
    /// variable naming it is unset. A variable that is set must name a working interpreter: the test
    /// then fails instead of skipping.
    fn interpreter(&self) -> Option<PathBuf> {
        if let Some(path) = std::env::var_os(self.env) {
            return Some(PathBuf::from(path));
        }
        let loads = Command::new(self.default)
            .args(self.probe)
            .current_dir(root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if loads {
            return Some(PathBuf::from(self.default));
        }
        eprintln!(
            "SKIPPED: {} client: {} or its MySQL driver is missing and {} is unset \
             (scripts/ensure-languages.sh installs them)",
            self.name, self.default, self.env
        );
        None
    }

    /// Runs the script on `url` with `input` on stdin and returns what it printed, as JSON.
    fn run(&self, interpreter: &Path, url: &str, input: &Value) -> Value {
        let mut child = Command::new(interpreter)
            .arg(root().join(self.script))
            .arg(url)
            .env_remove("DATABASE_URL")
            .current_dir(root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} client: cannot run {interpreter:?}: {e}", self.name));
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.to_string().as_bytes()).unwrap();
        drop(stdin);
        let out = wait_output(child, Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{} client failed ({:?}) on {input}\nstdout:\n{stdout}\nstderr:\n{}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("{} client printed {stdout:?}: {e}", self.name))
    }
}

/// The steps every client enqueues: `after` names earlier steps by position.
fn steps() -> Value {
    json!([
        {"kind": "mail.welcome", "payload": {"email": "ada@example.com", "name": "Ada Lovelace ✓", "tags": []}},
        {"kind": "image.resize", "payload": {"image_id": 7, "width": 640, "crop": null},
         "queue": "media", "priority": -5, "delay_secs": 600, "max_attempts": 5, "timeout_secs": 120},
        {"kind": "sync.user", "payload": {"user": 42}, "unique_key": "user:42"},
        {"kind": "sync.user", "payload": {"user": 42, "again": true}, "unique_key": "user:42"},
        {"kind": "report.build", "payload": {"day": "2026-11-24"}, "after": [0, 2], "priority": 2},
        {"batch": [
            {"kind": "thumb", "payload": {"n": 1}},
            {"kind": "thumb", "payload": {"n": 2}, "priority": 3, "queue": "media"},
            {"kind": "thumb", "payload": {"n": 3}, "delay_secs": 30}
         ],
         "callback": {"kind": "thumbs.done", "payload": {"batch": "thumbs"}}}
    ])
}

/// What each client's `example` enqueues for order `order` of customer "ada", as steps.
fn example_steps(order: u64) -> Value {
    json!([
        {"kind": "mail.order", "payload": {"order": order}, "queue": "mail", "priority": -5},
        {"kind": "sync.customer", "payload": {"customer": "ada"}, "unique_key": "customer:ada"},
        {"batch": ([0, 1, 2].map(|n| json!({"kind": "photo.resize", "payload": {"n": n}}))),
         "callback": {"kind": "order.report", "payload": {"order": order}}},
        {"kind": "order.ship", "payload": {"order": order}, "after": [0, 1]}
    ])
}

/// The `jobq enqueue` arguments of one job of a document (`after`: the ids it waits for).
fn cli_args(job: &Value, after: &[u64], after_ended: bool) -> Vec<String> {
    let mut args = vec!["enqueue".to_string(), job["kind"].as_str().unwrap().into()];
    let mut flag = |name: &str, value: String| args.extend([format!("--{name}"), value]);
    if let Some(p) = job.get("payload") {
        flag("payload", p.to_string());
    }
    if let Some(q) = job.get("queue") {
        flag("queue", q.as_str().unwrap().into());
    }
    if let Some(p) = job.get("priority") {
        flag("priority", p.to_string());
    }
    if let Some(d) = job.get("delay_secs") {
        flag("in", format!("{d}s"));
    }
    if let Some(n) = job.get("max_attempts") {
        flag("max-attempts", n.to_string());
    }
    if let Some(t) = job.get("timeout_secs") {
        flag("timeout", format!("{t}s"));
    }
    if let Some(k) = job.get("unique_key") {
        flag("unique-key", k.as_str().unwrap().into());
    }
    if !after.is_empty() {
        let ids = after
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        flag(if after_ended { "after-ended" } else { "after" }, ids);
    }
    args.push("--json".into());
    args
}

/// Enqueues one job with `jobq enqueue --json` and returns what it printed.
fn cli_enqueue(url: &str, job: &Value, after: &[u64], after_ended: bool) -> Value {
    let args = cli_args(job, after, after_ended);
    let out = run_jobq(
        Some(url),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "jobq {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{stdout:?}: {e}"))
}

/// Replays `steps` with `jobq enqueue`, one command per job, and returns what a client prints for them.
fn cli_run(url: &str, steps: &Value) -> Value {
    let mut results: Vec<Value> = Vec::new();
    for step in steps.as_array().unwrap() {
        if let Some(batch) = step.get("batch") {
            let ids: Vec<u64> = batch
                .as_array()
                .unwrap()
                .iter()
                .map(|job| cli_enqueue(url, job, &[], false)["id"].as_u64().unwrap())
                .collect();
            let callback = step
                .get("callback")
                .map(|c| cli_enqueue(url, c, &ids, true)["id"].clone());
            results.push(json!({"ids": ids, "callback": callback}));
            continue;
        }
        let after: Vec<u64> = step
            .get("after")
            .map(|a| a.as_array().unwrap().to_vec())
            .unwrap_or_default()
            .iter()
            .map(|i| {
                results[i.as_u64().unwrap() as usize]["id"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        let mut printed = cli_enqueue(url, step, &after, false);
        // What the clients print: they do not debounce, so `merged` (always false here) is not theirs.
        if let Some(o) = printed.as_object_mut() {
            assert_eq!(o.remove("merged"), Some(Value::Bool(false)), "{step}");
        }
        results.push(printed);
    }
    Value::Array(results)
}

/// What a database holds, with ids replaced by positions (the first job is 0).
#[derive(Debug, PartialEq)]
struct Snapshot {
    /// Every job: column name → value (text, or JSON for the payload; `run_at` as microseconds after
    /// `created_at`).
    jobs: Vec<BTreeMap<String, Value>>,
    /// `jobq_job_deps`: (waiting job, job it waits for, until).
    deps: BTreeSet<(usize, usize, String)>,
    positions: HashMap<u64, usize>,
}

impl Snapshot {
    async fn read(pool: &sqlx::MySqlPool) -> Snapshot {
        let columns: Vec<String> = sqlx::query_scalar(
            "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'job_queue' ORDER BY ORDINAL_POSITION",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        let compared: Vec<&String> = columns
            .iter()
            .filter(|c| !["id", "created_at", "run_at", "payload"].contains(&c.as_str()))
            .collect();
        let mut select = vec![
            "id".to_string(),
            "CAST(payload AS CHAR)".into(),
            "TIMESTAMPDIFF(MICROSECOND, created_at, run_at)".into(),
        ];
        select.extend(compared.iter().map(|c| format!("CAST(`{c}` AS CHAR)")));
        let sql = format!("SELECT {} FROM job_queue ORDER BY id", select.join(", "));
        let rows = sqlx::query(&sql).fetch_all(pool).await.unwrap();
        let mut positions = HashMap::new();
        let mut jobs = Vec::new();
        for (n, row) in rows.iter().enumerate() {
            positions.insert(row.get::<u64, _>(0), n);
            let mut job = BTreeMap::new();
            let payload: String = row.get(1);
            job.insert("payload".into(), serde_json::from_str(&payload).unwrap());
            job.insert(
                "run_at - created_at (µs)".into(),
                json!(row.get::<i64, _>(2)),
            );
            for (i, c) in compared.iter().enumerate() {
                let v: Option<String> = row.get(i + 3);
                job.insert(c.to_string(), v.map_or(Value::Null, Value::String));
            }
            jobs.push(job);
        }
        let edges: Vec<(u64, u64, String)> = sqlx::query_as(
            "SELECT job_id, after_id, CAST(until AS CHAR) FROM jobq_job_deps ORDER BY job_id, after_id",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        let at = |id: u64| positions.get(&id).copied().unwrap_or(usize::MAX);
        let deps = edges
            .into_iter()
            .map(|(j, a, u)| (at(j), at(a), u))
            .collect();
        Snapshot {
            jobs,
            deps,
            positions,
        }
    }

    /// `printed` (what a client or `jobq enqueue` printed for a document) with ids as positions.
    fn positions_of(&self, printed: &Value) -> Value {
        match printed {
            Value::Number(n) => json!(self.positions.get(&n.as_u64().unwrap())),
            Value::Array(items) => items.iter().map(|v| self.positions_of(v)).collect(),
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| {
                    let v = if k == "existing" {
                        v.clone()
                    } else {
                        self.positions_of(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
            other => other.clone(),
        }
    }

    /// How `self` (a client's database) differs from `expected` (`jobq enqueue`'s), one line each.
    fn differences(&self, expected: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        if self.jobs.len() != expected.jobs.len() {
            out.push(format!(
                "{} jobs, `jobq enqueue` wrote {}",
                self.jobs.len(),
                expected.jobs.len()
            ));
        }
        for (n, (got, want)) in self.jobs.iter().zip(&expected.jobs).enumerate() {
            for (column, w) in want {
                let g = got.get(column).unwrap_or(&Value::Null);
                if g != w {
                    out.push(format!(
                        "job #{n} ({}): {column} is {g}, `jobq enqueue` wrote {w}",
                        want["kind"]
                    ));
                }
            }
        }
        for edge in self.deps.symmetric_difference(&expected.deps) {
            let whose = if self.deps.contains(edge) {
                "only the client"
            } else {
                "only `jobq enqueue`"
            };
            out.push(format!(
                "jobq_job_deps (job #{}, after #{}, until {}): written by {whose}",
                edge.0, edge.1, edge.2
            ));
        }
        out
    }
}

/// The grants docs/clients.md gives the application's user, for `db` (each `GRANT … TO 'app_enqueue'`
/// of the doc, `app.` replaced), and INSERT on its own `orders` table.
fn documented_grants() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/clients.md")).unwrap();
    let mut grants: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("GRANT "))
        .filter_map(|l| l.strip_suffix(" TO 'app_enqueue'@'%';"))
        .map(|g| g.replace(" ON app.", " ON {db}."))
        .collect();
    assert!(
        grants.len() >= 2,
        "docs/clients.md lists no GRANT … TO 'app_enqueue'@'%' lines"
    );
    grants.push("INSERT ON {db}.orders".into());
    grants
}

// language=MySQL
const ORDERS: &str =
    "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(100) NOT NULL)";

async fn count(db: &TestDb, table: &str) -> i64 {
    db.scalar(&format!("SELECT COUNT(*) FROM {table}")).await
}

/// Runs `client` as described in the module's doc and compares.
async fn writes_what_jobq_enqueue_writes(client: &Client) {
    let Some(interpreter) = client.interpreter() else {
        return;
    };
    let db = TestDb::new().await;
    db.exec(ORDERS).await;
    let mut users = Users::new(&db);
    let grants = documented_grants();
    let url = users
        .create(
            "clients",
            &grants.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .await;
    let printed = client.run(&interpreter, &url, &json!({"steps": steps()}));
    let example = client.run(&interpreter, &url, &json!({"example": "ada"}));
    let order = example["order"]
        .as_u64()
        .unwrap_or_else(|| panic!("{} example printed {example}", client.name));
    assert_eq!(count(&db, "orders").await, 2, "an order per transaction");

    let cli = TestDb::new().await;
    let cli_printed = cli_run(&cli.url, &steps());
    cli_run(&cli.url, &example_steps(order));

    let got = Snapshot::read(&db.pool).await;
    let want = Snapshot::read(&cli.pool).await;
    let differences = got.differences(&want);
    assert!(
        differences.is_empty(),
        "the {} client wrote other rows than `jobq enqueue`:\n{}",
        client.name,
        differences.join("\n")
    );
    assert_eq!(
        got.positions_of(&printed),
        want.positions_of(&cli_printed),
        "the {} client printed other ids than `jobq enqueue` (as positions)",
        client.name
    );
    assert_eq!(
        got.positions_of(&printed)[3],
        json!({"id": 2, "existing": true}),
        "the second enqueue of a held unique key returns the holder"
    );

    // Rolled back: the order and every job of the document are gone together.
    client.run(
        &interpreter,
        &url,
        &json!({"steps": steps(), "rollback": true}),
    );
    assert_eq!(count(&db, "orders").await, 2, "the order was rolled back");
    assert_eq!(
        Snapshot::read(&db.pool).await,
        got,
        "the {} client's rolled-back jobs stayed",
        client.name
    );
}

#[tokio::test]
async fn the_python_client_writes_what_jobq_enqueue_writes() {
    writes_what_jobq_enqueue_writes(&PYTHON).await;
}

#[tokio::test]
async fn the_node_client_writes_what_jobq_enqueue_writes() {
    writes_what_jobq_enqueue_writes(&NODE).await;
}

#[tokio::test]
async fn the_php_client_writes_what_jobq_enqueue_writes() {
    writes_what_jobq_enqueue_writes(&PHP).await;
}

#[tokio::test]
async fn the_ruby_client_writes_what_jobq_enqueue_writes() {
    writes_what_jobq_enqueue_writes(&RUBY).await;
}

/// The comparison sees a difference in one column: a waiting job's dependency without
/// `has_dependents` (what plain SQL that forgets the flag writes) and a payload with one value changed.
#[tokio::test]
async fn the_comparison_names_a_column_that_differs() {
    let a = TestDb::new().await;
    let b = TestDb::new().await;
    cli_run(&a.url, &steps());
    cli_run(&b.url, &steps());
    let want = Snapshot::read(&b.pool).await;
    assert_eq!(
        Snapshot::read(&a.pool).await.differences(&want),
        Vec::<String>::new()
    );

    a.exec("UPDATE job_queue SET has_dependents = 0 WHERE kind = 'mail.welcome'")
        .await;
    a.exec(
        "UPDATE job_queue SET payload = '{\"n\": 4}' WHERE kind = 'thumb' AND payload LIKE '%3%'",
    )
    .await;
    a.exec("DELETE FROM jobq_job_deps ORDER BY job_id, after_id LIMIT 1")
        .await;
    let differences = Snapshot::read(&a.pool).await.differences(&want);
    let text = differences.join("\n");
    assert_eq!(differences.len(), 3, "{text}");
    assert!(
        text.contains(
            "job #0 (\"mail.welcome\"): has_dependents is \"0\", `jobq enqueue` wrote \"1\""
        ),
        "{text}"
    );
    assert!(text.contains("payload is {\"n\":4}"), "{text}");
    assert!(
        text.contains(
            "jobq_job_deps (job #3, after #0, until done): written by only `jobq enqueue`"
        ),
        "{text}"
    );
}

/// The language of a docs/clients.md code block, by its info string, and the file it comes from.
fn client_of(fence: &str) -> Option<&'static Client> {
    [&PYTHON, &NODE, &PHP, &RUBY]
        .into_iter()
        .find(|c| c.fence == fence)
}

/// Every code block of docs/clients.md in a client's language is a region of that client's file, as it
/// is there (`region NAME` … `endregion NAME` comments), and every region of every file is shown.
#[test]
fn the_docs_show_the_clients_files_as_they_are() {
    let doc = std::fs::read_to_string(root().join("docs/clients.md")).unwrap();
    let mut shown: BTreeSet<(&str, String)> = BTreeSet::new();
    let mut lines = doc.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let Some(fence) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .map(|(_, l)| l)
            .take_while(|l| !l.starts_with("```"))
            .collect();
        let Some(client) = client_of(fence.trim()) else {
            continue;
        };
        let file = std::fs::read_to_string(root().join(client.script)).unwrap();
        let regions = regions(&file);
        let block = body.join("\n");
        let Some((name, _)) = regions.iter().find(|(_, text)| *text == block) else {
            panic!(
                "docs/clients.md:{}: the {fence} block is not a region of {} as it is there \
                 (regions: {:?}); copy the region again",
                n + 2,
                client.script,
                regions.iter().map(|(n, _)| n).collect::<Vec<_>>()
            );
        };
        shown.insert((client.script, name.clone()));
    }
    for client in [&PYTHON, &NODE, &PHP, &RUBY] {
        let file = std::fs::read_to_string(root().join(client.script)).unwrap();
        for (name, _) in regions(&file) {
            assert!(
                shown.contains(&(client.script, name.clone())),
                "docs/clients.md does not show region {name:?} of {}",
                client.script
            );
        }
    }
}

/// The regions of a file: (name, the lines between `region NAME` and `endregion NAME`).
fn regions(file: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = file.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((_, name)) = line.split_once(" region ") else {
            continue;
        };
        let name = name.trim();
        let end = lines[i + 1..]
            .iter()
            .position(|l| l.trim_end().ends_with(&format!("endregion {name}")))
            .unwrap_or_else(|| panic!("region {name} has no endregion"));
        out.push((name.to_string(), lines[i + 1..i + 1 + end].join("\n")));
    }
    out
}
