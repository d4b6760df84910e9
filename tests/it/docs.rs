//! The docs' examples run, so the docs cannot drift from the code.
//!
//! Every Markdown file of the docs is read: `README.md`, `CONTRIBUTING.md` and everything under `docs/`.
//! In them:
//! - every ` ```toml ` block is a whole `jobq.toml`: jobq's own loader reads it ([`Config::load`]) and
//!   builds the worker, reaper and scheduler settings from it, for the top level and every
//!   `[databases.NAME]` section;
//! - every ` ```sql ` block runs, statement by statement, against a freshly migrated database called
//!   `app` (the name the examples use) on a private server, where GRANTs and users do no harm to anyone
//!   else. Statements that find no rows are fine: what is checked is that each one runs;
//! - every `jobq …` command line of a ` ```sh `, ` ```console ` or ` ```crontab ` block, and the
//!   `ExecStart=` of a systemd unit (` ```ini `), parses with the binary's own argument parser (the binary stops right after parsing when `JOBQ_TEST_PARSE_ONLY` is
//!   set, a `test-util` hook). A shell variable on such a line (`--after "$a"`) stands for a job id the
//!   block made before, as in `b=$(jobq enqueue transform --after "$a")`: the check puts 1, 2, … in its
//!   place, one number per variable name.
//!
//! A block that fails is named by file and line. Two markers, each an HTML comment on the lines just
//! above a fence (invisible on the rendered page), change what is done with a block; keep them rare:
//! - `<!-- doc-test: skip REASON -->`: the block is not checked (a fragment, a placeholder). The reason
//!   is required.
//! - `<!-- doc-test: given SQL -->` (` ```sql ` only): statements to run first, for what the example
//!   takes as given: the application's own tables, the users a GRANT names.
//!
//! Beside the blocks: the DBA example for jobs in backoff must read an index, not the whole table; the
//! attempt outcomes the docs list are every outcome jobq records; and the example alerting rules
//! (`examples/alerts.yml`) fire and stay quiet where they should under `promtool test rules`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use jobq::config::Config;
use jobq::{Handlers, JobContext, JobError};
use sqlx::{Connection, Executor, Row};

use crate::common::{PrivateServer, ServerSetup, TestDb, jobq, scratch_dir, wait_output};

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files of the docs: README.md, CONTRIBUTING.md if there is one, and every `*.md` under
/// `docs/`, in a stable order.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.map(Result::unwrap) {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md"]
        .iter()
        .map(|f| root().join(f))
        .filter(|p| p.exists())
        .collect();
    let mut docs = Vec::new();
    walk(&root().join("docs"), &mut docs);
    docs.sort();
    files.extend(docs);
    files
}

/// Every Markdown file of the docs, one after the other.
fn all_docs() -> String {
    markdown_files()
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The anchors GitHub gives the headings of a Markdown file (code blocks skipped): lower case, spaces
/// to dashes, punctuation dropped, a repeated heading numbered.
fn anchors(text: &str) -> std::collections::BTreeSet<String> {
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    let mut out = std::collections::BTreeSet::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        let Some(title) = line.trim_start_matches('#').strip_prefix(' ') else {
            continue;
        };
        if fence || !line.starts_with('#') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// Every link between the docs leads somewhere: the file exists, and a `#anchor` is a heading of it.
/// The README is split into docs/ files that link to each other; a heading renamed or moved must not
/// leave a reader at a dead end.
#[test]
fn every_link_between_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let here = file.parent().unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let dest = if path.is_empty() {
                file.clone()
            } else {
                here.join(path)
            };
            let name = file.strip_prefix(root()).unwrap().display().to_string();
            if !dest.exists() {
                broken.push(format!("{name}: {target}: no such file"));
                continue;
            }
            if !anchor.is_empty()
                && dest.extension().is_some_and(|x| x == "md")
                && !anchors(&std::fs::read_to_string(&dest).unwrap()).contains(anchor)
            {
                broken.push(format!("{name}: {target}: no such heading"));
            }
        }
    }
    assert!(checked > 20, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A fenced code block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// The file, relative to the repository's root.
    file: String,
    /// The line (1-based) of the block's first line of content.
    line: usize,
    /// The first word of the info string (`toml`, `sql`, `sh`, …).
    lang: String,
    /// The `doc-test:` markers just above the fence, without the comment's delimiters.
    markers: Vec<String>,
    /// The content, indentation as written.
    lines: Vec<String>,
}

impl Block {
    /// `file:line` of line `n` (0-based) of the content.
    fn at(&self, n: usize) -> String {
        format!("{}:{}", self.file, self.line + n)
    }

    /// Why the block is not checked, if it is marked so.
    fn skip(&self) -> Option<&str> {
        self.markers
            .iter()
            .find_map(|m| m.strip_prefix("skip"))
            .map(str::trim)
    }

    /// The statements a `given` marker runs first.
    fn given(&self) -> Vec<&str> {
        self.markers
            .iter()
            .filter_map(|m| m.strip_prefix("given "))
            .collect()
    }

    fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// Every fenced block of every docs file whose language is one of `langs`. A marker that is not one of
/// the two known ones, or a skip without a reason, fails here: a typo must not silently skip a block.
fn blocks(langs: &[&str]) -> Vec<Block> {
    let mut out = Vec::new();
    for path in markdown_files() {
        let file = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let trimmed = lines[i].trim_start();
            let Some(info) = trimmed.strip_prefix("```") else {
                i += 1;
                continue;
            };
            let indent = lines[i].len() - trimmed.len();
            let lang = info.split_whitespace().next().unwrap_or("").to_string();
            let mut markers = Vec::new();
            let mut k = i;
            while k > 0 {
                let above = lines[k - 1].trim();
                let Some(m) = above
                    .strip_prefix("<!-- doc-test:")
                    .and_then(|m| m.strip_suffix("-->"))
                else {
                    break;
                };
                let m = m.trim().to_string();
                assert!(
                    m.starts_with("given ") || (m.starts_with("skip ") && m.len() > "skip ".len()),
                    "{file}:{k}: unknown doc-test marker {m:?} (known: `skip REASON`, `given SQL`)"
                );
                markers.insert(0, m);
                k -= 1;
            }
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].trim_start().starts_with("```") {
                end += 1;
            }
            if langs.contains(&lang.as_str()) {
                out.push(Block {
                    file: file.clone(),
                    line: start + 1,
                    lang,
                    markers,
                    lines: lines[start..end]
                        .iter()
                        .map(|l| l.get(indent..).unwrap_or(l.trim_start()).to_string())
                        .collect(),
                });
            }
            i = end + 1;
        }
    }
    out
}

/// Panics listing every failure, if there are any, after checking that something was checked at all.
fn report(what: &str, checked: usize, failures: &[String]) {
    assert!(
        checked > 0,
        "no {what} found in the docs: is the extraction broken?"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} {what} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{checked} {what} checked");
}

// ---------------------------------------------------------------------------------------------- TOML

/// Loads `path` as jobq does and builds every service's settings from it.
fn load_config(path: &Path) -> Result<(), String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    for c in std::iter::once(&config).chain(config.databases.values()) {
        c.worker().map_err(|e| e.to_string())?;
        c.reaper().map_err(|e| e.to_string())?;
        c.scheduler().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The line of `block` a loader error points at (TOML's errors say `at line N`), else its first.
fn error_line(block: &Block, message: &str) -> String {
    let n = message
        .split("line ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| (1..=block.lines.len()).contains(n))
        .unwrap_or(1);
    block.at(n - 1)
}

#[test]
fn every_toml_block_of_the_docs_is_a_config_jobq_loads() {
    let dir = scratch_dir();
    let path = dir.join("block.toml");
    let (mut checked, mut failures) = (0, Vec::new());
    for b in blocks(&["toml"]) {
        if b.skip().is_some() {
            continue;
        }
        checked += 1;
        std::fs::write(&path, b.text()).unwrap();
        if let Err(e) = load_config(&path) {
            let e = e.replace(&format!("config {}: ", path.display()), "");
            failures.push(format!("{}: {e}", error_line(&b, &e)));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    report("TOML blocks", checked, &failures);
}

// ----------------------------------------------------------------------------------------------- SQL

/// The statements of `sql` with the line (0-based) each starts on: split at `;` outside quotes and
/// `--` comments; comment-only pieces are left out.
fn statements(sql: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let (mut current, mut start, mut line) = (String::new(), None::<usize>, 0);
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
        }
        match quote {
            Some(q) => {
                current.push(c);
                if c == '\\' && q != '`' {
                    if let Some(n) = chars.next() {
                        current.push(n);
                    }
                } else if c == q {
                    quote = None;
                }
                continue;
            }
            None if c == '-' && chars.peek() == Some(&'-') => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        line += 1;
                        current.push('\n');
                        break;
                    }
                }
                continue;
            }
            None if c == ';' => {
                if let Some(s) = start.take() {
                    out.push((s, current.trim().to_string()));
                }
                current.clear();
                continue;
            }
            None if matches!(c, '\'' | '"' | '`') => quote = Some(c),
            None => {}
        }
        if start.is_none() && !c.is_whitespace() {
            start = Some(line);
        }
        current.push(c);
    }
    if let Some(s) = start {
        out.push((s, current.trim().to_string()));
    }
    out
}

#[test]
fn statements_are_split_at_semicolons_outside_quotes_and_comments() {
    let s = statements("-- a; comment\nSELECT ';' -- x;\n, 2;\n\nUPDATE t\nSET a = 1;\n-- end");
    assert_eq!(
        s,
        vec![
            (1, "SELECT ';' \n, 2".to_string()),
            (4, "UPDATE t\nSET a = 1".to_string())
        ]
    );
}

/// Runs `sql` on `conn`, reading any rows it returns.
async fn run(conn: &mut sqlx::MySqlConnection, sql: &str) -> Result<(), sqlx::Error> {
    conn.fetch_all(sql).await.map(drop)
}

#[tokio::test]
async fn every_sql_block_of_the_docs_runs() {
    let blocks: Vec<Block> = blocks(&["sql"])
        .into_iter()
        .filter(|b| b.skip().is_none())
        .collect();
    // A server of its own: the examples grant to users and name the database `app`.
    let mut server = PrivateServer::create(ServerSetup {
        user: Some(("docs".into(), "docs-pw".into())),
        args: Vec::new(),
        log: None,
    });
    server.start().await;
    let mut admin = sqlx::MySqlConnection::connect(&server.url("mysql"))
        .await
        .unwrap();
    let mut failures = Vec::new();
    for b in &blocks {
        // Each block on a fresh database, so that no block depends on what another left.
        run(&mut admin, "DROP DATABASE IF EXISTS app")
            .await
            .unwrap();
        run(&mut admin, "CREATE DATABASE app").await.unwrap();
        let pool = jobq::connect(&jobq::ConnectConfig::new(server.url("app")).unwrap())
            .await
            .unwrap();
        jobq::migrate(&pool).await.unwrap();
        pool.close().await;
        let mut conn = sqlx::MySqlConnection::connect(&server.url("app"))
            .await
            .unwrap();
        for given in b.given() {
            for (_, s) in statements(given) {
                if let Err(e) = run(&mut conn, &s).await {
                    failures.push(format!("{} (given): {s}: {e}", b.at(0)));
                }
            }
        }
        for (n, s) in statements(&b.text()) {
            if let Err(e) = run(&mut conn, &s).await {
                failures.push(format!("{}: {e}\n    {s}", b.at(n)));
            }
        }
        conn.close().await.ok();
        // Users are server-wide: a later block's `given` may create the same ones.
        let users: Vec<(String, String)> = sqlx::query_as(
            "SELECT CAST(User AS CHAR), CAST(Host AS CHAR) FROM mysql.user WHERE User NOT IN \
             ('docs', 'root', 'mariadb.sys', 'mysql', '')",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        for (user, host) in users {
            run(&mut admin, &format!("DROP USER '{user}'@'{host}'"))
                .await
                .unwrap();
        }
    }
    admin.close().await.ok();
    report("SQL blocks", blocks.len(), &failures);
}

/// The docs' answer to "what is stuck in backoff": the statement under the one SQL comment that says
/// `backoff`.
fn backoff_statement() -> String {
    let mut found = Vec::new();
    for b in blocks(&["sql"]) {
        let Some(comment) = b
            .lines
            .iter()
            .position(|l| l.trim_start().starts_with("--") && l.contains("backoff"))
        else {
            continue;
        };
        let next = statements(&b.text())
            .into_iter()
            .find(|(n, _)| *n > comment);
        found.extend(next.map(|(_, s)| s));
    }
    assert_eq!(found.len(), 1, "one backoff example: {found:?}");
    found.remove(0)
}

/// On a table of finished jobs with a few in backoff, the DBA example reads an index range of the
/// retry rows, not every row: `status` is computed in the view, so a filter on it alone cannot use an
/// index.
#[tokio::test]
async fn the_backoff_example_reads_an_index_not_the_whole_table() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 5000).await;
    db.exec(
        "UPDATE job_queue SET state = 'done', attempts = 1, finished_at = NOW(6) WHERE id > 20",
    )
    .await;
    db.exec(
        "UPDATE job_queue SET state = 'retry', attempts = 1, run_at = NOW(6) + INTERVAL 1 HOUR \
         WHERE id <= 10",
    )
    .await;
    db.exec("ANALYZE TABLE job_queue").await;
    let sql = backoff_statement();
    let mut conn = db.pool.acquire().await.unwrap();
    let plan = sqlx::query(&format!("EXPLAIN {sql}"))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    for r in &plan {
        let text = |c: &str| r.try_get::<Option<String>, _>(c).ok().flatten();
        let (table, access, key) = (text("table"), text("type"), text("key"));
        assert!(
            access.as_deref() != Some("ALL") && key.is_some(),
            "{sql}\nreads {table:?} with {access:?} (key {key:?}): a full scan"
        );
    }
    // And it answers: the ten jobs in backoff.
    let (rows, read_next) = crate::common::rows_and_read_next(&mut conn, &sql).await;
    assert_eq!(rows.len(), 10);
    let read_next: u64 = read_next.parse().unwrap();
    assert!(
        read_next <= 20,
        "{read_next} index entries read for 10 rows"
    );
}

// ------------------------------------------------------------------------------------------- outcomes

/// The attempt outcomes a list in the docs names: the words in parentheses after `` `outcome` `` on
/// the line that documents `attempt_history`.
fn documented_outcomes() -> Vec<String> {
    let docs = all_docs();
    let line = docs
        .lines()
        .find(|l| l.contains("`attempt_history`"))
        .expect("the docs document attempt_history");
    let list = line
        .split("`outcome` (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("attempt_history lists its outcomes in parentheses");
    list.split(',').map(|s| s.trim().to_string()).collect()
}

/// Every outcome jobq writes to `jobq_attempts` is one the docs list: a worker's retry, dead and
/// snoozed attempts and a reaper's release, each made happen here.
#[tokio::test]
async fn every_attempt_outcome_jobq_records_is_documented() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (kind, max_attempts) VALUES \
         ('flaky', 3), ('broken', 3), ('later', 3), ('orphan', 3)",
    )
    .await;
    // The orphan's claimant is a ghost that died an hour ago: a reaper releases it.
    let token = "ghost-host:4000001:1:1-1:00000000dead0001";
    let claimed = jobq::testing::claim_batch(&db.pool, token, "default", &["orphan".into()], 1)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    db.age_ghost_claims().await;
    let reaper = db.reaper();
    assert_eq!(reaper.run_once().await.unwrap().requeued, 1);
    db.exec("UPDATE job_queue SET run_at = NOW(6) + INTERVAL 1 HOUR WHERE kind = 'orphan'")
        .await;
    let handlers = Handlers::new()
        .register("flaky", |_: JobContext| async {
            Err::<(), _>(JobError::retry("try again"))
        })
        .unwrap()
        .register("broken", |_: JobContext| async {
            Err::<(), _>(JobError::fatal("cannot"))
        })
        .unwrap()
        .register("later", |_: JobContext| async {
            Err::<(), _>(JobError::snooze(Duration::from_secs(3600)))
        })
        .unwrap();
    db.worker(handlers).pool(db.pool.clone()).drain().await;
    let recorded: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT CAST(outcome AS CHAR) FROM jobq_attempts ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(recorded, ["dead", "released", "retry", "snoozed"]);
    let documented = documented_outcomes();
    let missing: Vec<&String> = recorded
        .iter()
        .filter(|o| !documented.contains(o))
        .collect();
    assert!(
        missing.is_empty(),
        "recorded but not documented: {missing:?} (the docs list {documented:?})"
    );
}

// ----------------------------------------------------------------------------------------------- CLI

/// The words of a shell line, with `$(`, `)`, `|`, `;`, `&&`, `||` and `&` as separators of their own
/// and `$NAME` / `${NAME}` (outside single quotes) replaced by `vars`' number for the name.
fn shell_words(line: &str, vars: &mut Vec<String>) -> Vec<Option<String>> {
    let mut out: Vec<Option<String>> = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let flush = |word: &mut Option<String>, out: &mut Vec<Option<String>>| {
        if let Some(w) = word.take() {
            out.push(Some(w));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if quote != Some('\'') && c == '$' && i + 1 < chars.len() {
            if chars[i + 1] == '(' && quote.is_none() {
                flush(&mut word, &mut out);
                out.push(None);
                i += 2;
                continue;
            }
            let braced = chars[i + 1] == '{';
            let from = i + 1 + usize::from(braced);
            let mut to = from;
            while to < chars.len() && (chars[to].is_ascii_alphanumeric() || chars[to] == '_') {
                to += 1;
            }
            if to > from {
                let name: String = chars[from..to].iter().collect();
                let n = match vars.iter().position(|v| *v == name) {
                    Some(p) => p + 1,
                    None => {
                        vars.push(name);
                        vars.len()
                    }
                };
                word.get_or_insert_with(String::new)
                    .push_str(&n.to_string());
                i = to + usize::from(braced);
                continue;
            }
        }
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.get_or_insert_with(String::new).push(c),
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    word.get_or_insert_with(String::new);
                }
                '\\' if i + 1 < chars.len() => {
                    i += 1;
                    word.get_or_insert_with(String::new).push(chars[i]);
                }
                c if c.is_whitespace() => flush(&mut word, &mut out),
                ')' | '|' | ';' | '&' => {
                    flush(&mut word, &mut out);
                    if out.last() != Some(&None) {
                        out.push(None);
                    }
                }
                '#' if word.is_none() => break,
                c => word.get_or_insert_with(String::new).push(c),
            },
        }
        i += 1;
    }
    flush(&mut word, &mut out);
    out
}

/// The arguments of every `jobq` command on a shell line (`None` separates commands); leading
/// `NAME=value` assignments and a crontab line's five time fields are not part of a command.
fn jobq_commands(words: &[Option<String>], crontab: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for command in words.split(Option::is_none) {
        let mut w: Vec<&str> = command.iter().flatten().map(String::as_str).collect();
        if crontab
            && w.len() > 5
            && w[..5]
                .iter()
                .all(|f| f.chars().all(|c| "0123456789*/,-".contains(c)))
        {
            w.drain(..5);
        }
        let program = w.iter().position(|x| {
            !(x.contains('=')
                && x.split('=')
                    .next()
                    .unwrap()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_'))
        });
        let Some(p) = program else { continue };
        // `cd /srv/app && jobq …` is two commands; `cd` is not ours.
        if w[p] == "jobq" || w[p].ends_with("/jobq") {
            out.push(w[p + 1..].iter().map(|s| s.to_string()).collect());
        }
    }
    out
}

#[test]
fn shell_lines_are_split_into_jobq_commands() {
    let mut vars = Vec::new();
    let words = shell_words(r#"b=$(jobq enqueue t --after "$a,${c}") # note"#, &mut vars);
    assert_eq!(
        jobq_commands(&words, false),
        vec![vec!["enqueue", "t", "--after", "1,2"]]
    );
    let words = shell_words(
        "* * * * * cd /srv && X=y /usr/local/bin/jobq worker -q --payload '{\"a\": \"$b\"}'",
        &mut vars,
    );
    assert_eq!(
        jobq_commands(&words, true),
        vec![vec!["worker", "-q", "--payload", "{\"a\": \"$b\"}"]]
    );
}

#[test]
fn every_jobq_command_line_of_the_docs_parses() {
    // The hook is there and the parser refuses what it should: otherwise this test proves nothing.
    let parse = |args: &[&str]| {
        let child = jobq(None, args)
            .env("JOBQ_TEST_PARSE_ONLY", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_output(child, Duration::from_secs(20))
    };
    assert!(
        parse(&["stats"]).status.success(),
        "JOBQ_TEST_PARSE_ONLY is not honoured"
    );
    assert_eq!(parse(&["stats", "--no-such-flag"]).status.code(), Some(2));

    let (mut checked, mut failures) = (0, Vec::new());
    for b in blocks(&["sh", "bash", "shell", "console", "crontab", "ini"]) {
        if b.skip().is_some() {
            continue;
        }
        let mut vars = Vec::new();
        let mut n = 0;
        while n < b.lines.len() {
            let first = n;
            let mut line = b.lines[n].clone();
            while line.ends_with('\\') && n + 1 < b.lines.len() {
                line.pop();
                n += 1;
                line.push_str(&b.lines[n]);
            }
            n += 1;
            // A console shows commands after a prompt; a systemd unit runs its ExecStart.
            let prefix = match b.lang.as_str() {
                "console" => Some("$ "),
                "ini" => Some("ExecStart="),
                _ => None,
            };
            let line = match prefix {
                Some(p) => match line.strip_prefix(p) {
                    Some(l) => l.to_string(),
                    None => continue,
                },
                None => line,
            };
            let words = shell_words(&line, &mut vars);
            for args in jobq_commands(&words, b.lang == "crontab") {
                checked += 1;
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = parse(&args);
                if !out.status.success() {
                    let err = String::from_utf8_lossy(&out.stderr);
                    let err = err.lines().take(3).collect::<Vec<_>>().join(" / ");
                    failures.push(format!("{}: jobq {}: {err}", b.at(first), args.join(" ")));
                }
            }
        }
    }
    report("jobq command lines", checked, &failures);
}

// -------------------------------------------------------------------------------------------- alerts

/// promtool: `JOBQ_PROMTOOL` (set by scripts/test.sh from scripts/ensure-promtool.sh; it must run),
/// else `promtool` on PATH, else None.
fn promtool() -> Option<String> {
    if let Ok(p) = std::env::var("JOBQ_PROMTOOL")
        && !p.is_empty()
    {
        return Some(p);
    }
    std::process::Command::new("sh")
        .args(["-c", "command -v promtool"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Input series and the alerts they must and must not raise, in `promtool test rules` form. One
/// sample a minute.
const ALERT_TESTS: &str = r#"
rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  # A burst: five jobs of a kind die within a minute, after twenty quiet minutes. It pages at once and
  # clears within 15 minutes of the last death.
  - interval: 1m
    input_series:
      - series: 'jobq_jobs_finished_total{queue="default",kind="mail",outcome="dead",instance="w1:9187",job="jobq"}'
        values: '0x20 5x40'
    alert_rule_test:
      - { eval_time: 19m, alertname: JobqDeadJobs, exp_alerts: [] }
      - eval_time: 21m
        alertname: JobqDeadJobs
        exp_alerts: &mail_dying
          - exp_labels: { severity: warning, queue: default, kind: mail }
            exp_annotations: { summary: "jobq: mail jobs in default are dying" }
      - { eval_time: 34m, alertname: JobqDeadJobs, exp_alerts: *mail_dying }
      - { eval_time: 40m, alertname: JobqDeadJobs, exp_alerts: [] }

  # A kind's first death: its counter appears with 1 (a process counts an outcome from its first one).
  # Beside it a kind that never dies (its dead counter stays 0) and timeouts, counted apart.
  - interval: 1m
    input_series:
      - series: 'jobq_jobs_finished_total{queue="media",kind="resize",outcome="dead",instance="w2:9187",job="jobq"}'
        values: '_x30 1x30'
      - series: 'jobq_jobs_finished_total{queue="media",kind="thumb",outcome="dead",instance="w2:9187",job="jobq"}'
        values: '0x60'
      - series: 'jobq_jobs_finished_total{queue="media",kind="thumb",outcome="timeout",instance="w2:9187",job="jobq"}'
        values: '_x10 1x50'
    alert_rule_test:
      - { eval_time: 29m, alertname: JobqDeadJobs, exp_alerts: [] }
      - eval_time: 31m
        alertname: JobqDeadJobs
        exp_alerts:
          - exp_labels: { severity: warning, queue: media, kind: resize }
            exp_annotations: { summary: "jobq: resize jobs in media are dying" }
      - { eval_time: 50m, alertname: JobqDeadJobs, exp_alerts: [] }
      - eval_time: 11m
        alertname: JobqJobsTimingOut
        exp_alerts:
          - exp_labels: { severity: warning, queue: media, kind: thumb }
            exp_annotations: { summary: "jobq: thumb jobs in media are timing out" }
      - { eval_time: 30m, alertname: JobqJobsTimingOut, exp_alerts: [] }

  # Queues whose oldest due job waits longer and longer: mail and plain (whose reaper reports no pause
  # gauge at all) page after 5 minutes over 300 s; held is paused on purpose and never pages.
  - interval: 1m
    input_series:
      - series: 'jobq_queue_oldest_due_age_seconds{queue="mail",instance="reaper:9188",job="jobq"}'
        values: '0+60x30'
      - series: 'jobq_queue_paused{queue="mail",instance="reaper:9188",job="jobq"}'
        values: '0x30'
      - series: 'jobq_queue_oldest_due_age_seconds{queue="plain",instance="reaper:9188",job="jobq"}'
        values: '0+60x30'
      - series: 'jobq_queue_oldest_due_age_seconds{queue="held",instance="reaper:9188",job="jobq"}'
        values: '0+60x30'
      - series: 'jobq_queue_paused{queue="held",instance="reaper:9188",job="jobq"}'
        values: '1x30'
    alert_rule_test:
      - { eval_time: 10m, alertname: JobqJobsWaiting, exp_alerts: [] }
      - eval_time: 12m
        alertname: JobqJobsWaiting
        exp_alerts:
          - exp_labels: { severity: warning, queue: mail }
            exp_annotations: { summary: "jobq queue mail: the oldest due job has waited 12m 0s" }
          - exp_labels: { severity: warning, queue: plain }
            exp_annotations: { summary: "jobq queue plain: the oldest due job has waited 12m 0s" }
"#;

/// The example rules the README points to (`examples/alerts.yml`), under `promtool test rules`.
#[test]
fn the_example_alerts_fire_when_they_should_and_only_then() {
    let Some(promtool) = promtool() else {
        eprintln!(
            "SKIPPED the_example_alerts_fire_when_they_should_and_only_then: no promtool \
             (JOBQ_PROMTOOL is unset and none is on PATH; scripts/test.sh installs one with \
             scripts/ensure-promtool.sh)"
        );
        return;
    };
    assert!(
        all_docs().contains("`examples/alerts.yml`"),
        "the docs no longer point to examples/alerts.yml: test the rules they show instead"
    );
    let dir = scratch_dir();
    std::fs::copy(root().join("examples/alerts.yml"), dir.join("alerts.yml")).unwrap();
    std::fs::write(dir.join("tests.yml"), ALERT_TESTS).unwrap();
    let promtool_in_dir = |args: &[&str]| {
        let child = std::process::Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{promtool}: {e}"));
        let out = wait_output(child, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "promtool {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    promtool_in_dir(&["test", "rules", "tests.yml"]);
    // The README's Prometheus config, with the rules beside it as it names them.
    let configs: Vec<Block> = blocks(&["yaml", "yml"])
        .into_iter()
        .filter(|b| b.skip().is_none() && b.text().contains("scrape_configs:"))
        .collect();
    assert!(!configs.is_empty(), "the docs show a Prometheus config");
    for b in configs {
        std::fs::write(dir.join("prometheus.yml"), b.text()).unwrap();
        eprintln!("checking the Prometheus config at {}", b.at(0));
        promtool_in_dir(&["check", "config", "prometheus.yml"]);
    }
    std::fs::remove_dir_all(&dir).ok();
}
