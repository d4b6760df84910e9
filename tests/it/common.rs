//! Test support: a fresh database per test, job factories, library workers (`TestDb::worker`), the jobq
//! binary, waiting with a deadline, and private database servers.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use jobq::ConnectConfig;
use sqlx::{Executor, MySqlPool};

/// The server tests run against, as a URL whose database part is replaced per test.
pub fn base_url() -> String {
    std::env::var("JOBQ_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

fn url_for(db: &str) -> String {
    let base = base_url();
    let (head, _) = base.rsplit_once('/').expect("URL has a database part");
    format!("{head}/{db}")
}

/// A database of its own for one test, dropped when the test ends.
pub struct TestDb {
    pub pool: MySqlPool,
    pub url: String,
    pub name: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestDb {
    /// A fresh, migrated database.
    pub async fn new() -> TestDb {
        let db = Self::unmigrated().await;
        jobq::migrate(&db.pool).await.expect("migrate");
        db
    }

    /// A fresh, empty database.
    pub async fn unmigrated() -> TestDb {
        let admin = admin_pool().await;
        sweep_leftovers(&admin).await;
        let name = format!(
            "jobq_t_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            rand::random::<u16>()
        );
        admin
            .execute(format!("CREATE DATABASE `{name}`").as_str())
            .await
            .expect("create test database");
        admin.close().await;
        let url = url_for(&name);
        let pool = jobq::connect(&ConnectConfig::new(&url).unwrap().max_connections(5))
            .await
            .expect("connect to test database");
        TestDb { pool, url, name }
    }

    /// Another pool on the same database (for a second worker with its own connections).
    pub async fn pool(&self, max: u32) -> MySqlPool {
        jobq::connect(&ConnectConfig::new(&self.url).unwrap().max_connections(max))
            .await
            .unwrap()
    }

    /// A reaper of this database that prunes nothing, for tests that run its passes by hand.
    pub fn reaper(&self) -> jobq::Reaper {
        jobq::Reaper::new(
            self.pool.clone(),
            jobq::ReaperConfig {
                retention: None,
                ..jobq::ReaperConfig::default()
            },
        )
        .unwrap()
    }

    /// Makes the claims of unregistered ("ghost") claimants an hour old, the way River's tests plant
    /// rows relative to the horizon: a reaper waits out the lease before it resets the rows of a
    /// claimant it knows nothing of.
    pub async fn age_ghost_claims(&self) {
        self.exec(
            "UPDATE job_queue SET claimed_at = claimed_at - INTERVAL 1 HOUR \
             WHERE claim LIKE 'ghost%' AND state = 'running'",
        )
        .await;
    }

    /// Runs `sql` and returns one value.
    pub async fn scalar<T>(&self, sql: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::MySql> + sqlx::Type<sqlx::MySql> + Send + Unpin,
    {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs `sql`.
    pub async fn exec(&self, sql: &str) {
        self.pool
            .execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A connection of its own with MariaDB's CHECK constraints off, as an application's session that
    /// writes rows past them (the pool's connections keep the checks).
    pub async fn unchecked_conn(&self) -> sqlx::MySqlConnection {
        use sqlx::Connection;
        let mut conn = sqlx::MySqlConnection::connect(&self.url).await.unwrap();
        conn.execute("SET SESSION check_constraint_checks = 0")
            .await
            .unwrap();
        conn
    }

    /// Running rows that are not on their claimant's holdings list (schema 38), as (id, token). None,
    /// at any moment, where only jobq stamps rows: a stamp writes the list in the same statement. One
    /// statement, so one consistent snapshot of both tables.
    pub async fn unlisted_running(&self) -> Vec<(u64, String)> {
        sqlx::query_as(
            "SELECT q.id, CAST(q.claim AS CHAR) FROM job_queue q WHERE q.state = 'running' \
             AND NOT EXISTS (SELECT 1 FROM jobq_holdings h WHERE h.holder = q.claim \
             AND JSON_CONTAINS(h.held_ids, CAST(q.id AS CHAR)))",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    /// Jobs per state, as `state=count` pairs sorted by state, e.g. "done=10".
    pub async fn states(&self) -> String {
        let rows: Vec<(Vec<u8>, i64)> = sqlx::query_as(
            "SELECT state, COUNT(*) FROM job_queue GROUP BY state ORDER BY CAST(state AS CHAR)",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap();
        rows.iter()
            .map(|(s, n)| format!("{}={n}", String::from_utf8_lossy(s)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Inserts `n` jobs of `kind` with plain SQL, 1,000 rows a statement.
    pub async fn insert_jobs(&self, kind: &str, n: usize) {
        let mut left = n;
        while left > 0 {
            let k = left.min(1000);
            let values = vec![format!("('{kind}')"); k].join(",");
            self.exec(&format!("INSERT INTO job_queue (kind) VALUES {values}"))
                .await;
            left -= k;
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop is synchronous: run the DROP on a runtime of its own in a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let admin = admin_pool().await;
                let _ = admin
                    .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
                    .await;
                admin.close().await;
            });
        })
        .join();
    }
}

async fn admin_pool() -> MySqlPool {
    jobq::connect(&ConnectConfig::new(base_url()).unwrap().max_connections(1))
        .await
        .expect("connect to the test server (set JOBQ_TEST_DATABASE_URL or run scripts/test.sh)")
}

/// Drops databases left by test processes that no longer exist (a test binary killed mid-run).
async fn sweep_leftovers(admin: &MySqlPool) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let mut first = false;
    ONCE.call_once(|| first = true);
    if !first {
        return;
    }
    let names: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'jobq\\_t\\_%'",
    )
    .fetch_all(admin)
    .await
    .unwrap_or_default();
    for name in names {
        let name = String::from_utf8_lossy(&name).into_owned();
        let pid: Option<u32> = name.split('_').nth(2).and_then(|p| p.parse().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = admin
                .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
                .await;
        }
    }
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes; panics with `what` on timeout.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The jobq binary built for these tests.
pub fn jobq_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_jobq"))
}

/// `jobq ARGS` against `url` (or no URL if None), with no config from the environment.
pub fn jobq(url: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(jobq_bin());
    cmd.args(args)
        .env_remove("JOBQ_DATABASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("JOBQ_CONFIG")
        .env_remove("JOBQ_DATABASE")
        .env_remove("JOBQ_DATABASE_SSL_MODE")
        .env_remove("JOBQ_DATABASE_SSL_CA")
        .env_remove("JOBQ_LOG")
        .env_remove("JOBQ_LOG_FORMAT")
        // Trace context and export settings come from each test, never from the caller's shell.
        .env_remove("TRACEPARENT")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        // An empty directory of our own, so no stray ./jobq.toml is picked up.
        .current_dir(empty_dir());
    if let Some(u) = url {
        cmd.env("JOBQ_DATABASE_URL", u);
    }
    cmd
}

fn empty_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("jobq-test-cwd-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
    .clone()
}

/// Runs a jobq command to its end, with a time limit.
pub fn run_jobq(url: Option<&str>, args: &[&str]) -> Output {
    let child = jobq(url, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn jobq");
    wait_output(child, Duration::from_secs(60))
}

/// Tests that open many connections at once (several worker processes, each with its program copies'
/// own sessions) take this in turn: two of them at once can pass the server's connection limit (151 by
/// default), and every test running beside them would fail to connect.
pub static HEAVY: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// A child process that is killed and reaped when dropped, so that a test failing part way leaves no
/// worker running (and holding connections) into the tests after it.
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    /// The child, no longer killed on drop: the test ends it itself.
    pub fn take(mut self) -> Child {
        self.0.take().expect("a child")
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("a child")
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("a child")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits for a child with a time limit, killing it if it overruns.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "jobq did not exit within {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A scratch directory for one test.
pub fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "jobq-test-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes a config file into `dir` and returns its path.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("jobq.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// `jobq worker --forever --config CONFIG` against the test database, stdout discarded; killed if the
/// test drops it (fails) before it ends it (`take`).
pub fn spawn_forever_worker(db: &TestDb, config: &Path) -> KillOnDrop {
    KillOnDrop::new(
        jobq(
            Some(&db.url),
            &["worker", "--forever", "--config", config.to_str().unwrap()],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn jobq worker"),
    )
}

/// A library worker for one test, from [`TestDb::worker`]: the test's handlers, a forever worker at the
/// defaults unless changed here, on a pool of its own.
#[must_use]
pub struct WorkerBuilder<'a> {
    db: &'a TestDb,
    handlers: jobq::Handlers,
    cfg: jobq::WorkerConfig,
    pool: Option<MySqlPool>,
}

impl TestDb {
    /// A worker running `handlers` on this database: `db.worker(h).start().await` runs one in the
    /// background until [`TestWorker::stop`]; `db.worker(h).drain().await` drains the queue in place.
    pub fn worker(&self, handlers: jobq::Handlers) -> WorkerBuilder<'_> {
        WorkerBuilder {
            db: self,
            handlers,
            cfg: jobq::WorkerConfig {
                mode: jobq::Mode::Forever,
                ..jobq::WorkerConfig::default()
            },
            pool: None,
        }
    }
}

impl WorkerBuilder<'_> {
    /// Serves these queues, in this order.
    pub fn queues(mut self, queues: &[&str]) -> Self {
        self.cfg.queues = queues.iter().map(|q| q.to_string()).collect();
        self
    }

    /// Changes any other setting.
    pub fn config(mut self, change: impl FnOnce(&mut jobq::WorkerConfig)) -> Self {
        change(&mut self.cfg);
        self
    }

    /// Runs on `pool` rather than on a pool of its own (four connections).
    pub fn pool(mut self, pool: MySqlPool) -> Self {
        self.pool = Some(pool);
        self
    }

    async fn build(self) -> jobq::Worker {
        let pool = match self.pool {
            Some(pool) => pool,
            None => self.db.pool(4).await,
        };
        jobq::Worker::new(pool, self.handlers, self.cfg).expect("worker settings")
    }

    /// Starts the worker in the background.
    pub async fn start(self) -> TestWorker {
        let worker = self.build().await;
        let signals = worker.signals();
        let stop = jobq::CancellationToken::new();
        let task = tokio::spawn(worker.run(stop.clone()));
        TestWorker {
            signals,
            task,
            stop,
        }
    }

    /// Runs the worker in drain mode until the queue is drained, and returns its report.
    pub async fn drain(mut self) -> jobq::WorkerReport {
        self.cfg.mode = jobq::Mode::Drain;
        let worker = self.build().await;
        tokio::time::timeout(
            Duration::from_secs(60),
            worker.run(jobq::CancellationToken::new()),
        )
        .await
        .expect("the worker drains within 60 s")
        .expect("the worker runs")
    }
}

/// A worker running in the background (see [`WorkerBuilder::start`]).
pub struct TestWorker {
    /// What it has done so far: wait on these rather than sleep (see CONTRIBUTING.md).
    pub signals: jobq::testing::Signals,
    task: tokio::task::JoinHandle<jobq::Result<jobq::WorkerReport>>,
    stop: jobq::CancellationToken,
}

impl TestWorker {
    /// Stops the worker as a shutdown signal would, and returns its report.
    pub async fn stop(self) -> jobq::WorkerReport {
        self.stop.cancel();
        self.finished().await
    }

    /// Waits for the worker to end by itself (a drain), and returns its report.
    pub async fn finished(self) -> jobq::WorkerReport {
        tokio::time::timeout(Duration::from_secs(120), self.task)
            .await
            .expect("the worker stops within 120 s")
            .expect("the worker task")
            .expect("the worker runs")
    }

    /// Waits until the worker has begun two more idle waits than it had: it has looked for work after
    /// this call and found nothing it may claim.
    pub async fn settled(&self) {
        let seen = self.signals.now().idle_waits;
        self.signals
            .wait_until("two more idle waits", Duration::from_secs(30), |c| {
                c.idle_waits >= seen + 2
            })
            .await;
    }
}

fn find(names: &[&str]) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
        for n in names {
            let p = Path::new(dir).join(n);
            if p.exists() {
                return p;
            }
        }
    }
    panic!("none of {names:?} is installed; run scripts/ensure-mariadb.sh");
}

/// How a [`PrivateServer`] is set up. The default: no grant tables (anyone logs in as root without a
/// password) and no options beyond the ones every private server gets.
#[derive(Debug, Clone, Default)]
pub struct ServerSetup {
    /// A user (name, password) created with every privilege, granting included, when the server starts
    /// (`--init-file`), with the grant tables on. Needed wherever the server must check logins: under
    /// `--skip-grant-tables` MariaDB lets every client in, plaintext too, whatever
    /// `require_secure_transport` says (measured on 10.11).
    pub user: Option<(String, String)>,
    /// More `mariadbd` options.
    pub args: Vec<String>,
    /// Where the server's error log goes, kept after the server is dropped (default: in its
    /// directory, removed with it). Appended to, so a restarted server adds to it.
    pub log: Option<PathBuf>,
}

/// A `mariadbd` of its own, on its own port, data directory, socket and tmpdir, for tests that must
/// restart a server or configure it in ways the shared one is not (the server binary is there wherever
/// `scripts/ensure-mariadb.sh` has run). Killed and removed when dropped.
pub struct PrivateServer {
    pub dir: PathBuf,
    pub port: u16,
    setup: ServerSetup,
    child: Option<Child>,
}

impl PrivateServer {
    /// Creates the data directory (`mariadb-install-db`, about a second) and picks a free port.
    pub fn create(setup: ServerSetup) -> Self {
        let dir = scratch_dir().join("mariadb");
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let out = Command::new(find(&["mariadb-install-db", "mysql_install_db"]))
            .args(["--no-defaults", "--skip-test-db", "--user=root"])
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--datadir={}", dir.join("data").display()))
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some((user, password)) = &setup.user {
            std::fs::write(
                dir.join("init.sql"),
                format!(
                    "CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY '{password}';\n\
                     GRANT ALL ON *.* TO '{user}'@'%' WITH GRANT OPTION;\n"
                ),
            )
            .unwrap();
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            dir,
            port,
            setup,
            child: None,
        }
    }

    /// `mysql://USER@127.0.0.1:PORT/db`.
    pub fn url(&self, db: &str) -> String {
        self.url_at("127.0.0.1", db)
    }

    /// The URL of database `db` through `host`, which must reach this server.
    pub fn url_at(&self, host: &str, db: &str) -> String {
        let creds = match &self.setup.user {
            Some((user, password)) => format!("{user}:{password}"),
            None => "root".to_string(),
        };
        format!("mysql://{creds}@{host}:{}/{db}", self.port)
    }

    /// Starts the server and waits until it takes connections.
    pub async fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        // A tmpdir of its own: at start-up the server deletes every `#sql*` file in its tmpdir, which in
        // the shared /tmp would include the temporary tables of the other server's running queries.
        let tmp = self.dir.join("tmp");
        let mut cmd = Command::new(find(&["mariadbd", "mysqld"]));
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args([
                "--user=root",
                "--innodb-buffer-pool-size=32M",
                "--skip-log-bin",
            ]);
        if !self
            .setup
            .args
            .iter()
            .any(|a| a.starts_with("--bind-address"))
        {
            cmd.arg("--bind-address=127.0.0.1");
        }
        match &self.setup.user {
            None => {
                cmd.arg("--skip-grant-tables");
            }
            Some(_) => {
                // Users are matched by address, not by a reverse lookup of 127.0.0.1.
                cmd.arg("--skip-name-resolve").arg(format!(
                    "--init-file={}",
                    self.dir.join("init.sql").display()
                ));
            }
        }
        let child = cmd
            .args(&self.setup.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let url = self.url("mysql");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let child = self.child.as_mut().expect("just started");
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "the private server exited ({status}):\n{}",
                    std::fs::read_to_string(self.log_path()).unwrap_or_default()
                );
            }
            if jobq::connect(&ConnectConfig::new(&url).unwrap())
                .await
                .is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for the private server; its log:\n{}",
                std::fs::read_to_string(self.log_path()).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_path(&self) -> PathBuf {
        self.setup
            .log
            .clone()
            .unwrap_or_else(|| self.dir.join("server.log"))
    }

    /// Kills the server (SIGKILL), as a crash or the OOM killer would, and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the server (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `jobq ARGS` with stderr piped and returns it with the first word after `marker` in its log
/// (where it listens: `"metrics on http://"`, `"dashboard on "`). Its stderr keeps being drained, so a
/// chatty process never blocks on a full pipe.
pub async fn spawn_listening(url: &str, args: &[&str], marker: &'static str) -> (Child, String) {
    let mut child = jobq(Some(url), args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let found = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stderr).lines();
        let found = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| {
                l.split(marker)
                    .nth(1)
                    .map(|rest| rest.split_whitespace().next().unwrap_or("").to_string())
            })
            .unwrap_or_else(|| panic!("the process never logged {marker:?}"));
        std::thread::spawn(move || for _ in lines {});
        found
    })
    .await
    .unwrap();
    (child, found)
}

/// Both claim SELECTs of one queue as runnable text with literal values (for EXPLAIN and handler
/// counts): the pick that locks by primary key, and the locking walk a worker claims with when the
/// picks locked nothing.
pub fn claim_selects(queue: &str, host: &str, kinds: &[&str], limit: u32) -> [String; 2] {
    use jobq::statements::{CLAIM_PICK_AHEAD, CLAIM_SELECT, CLAIM_SELECT_PAST_LOCKED};
    let q = format!("'{queue}'");
    let h = format!("'{host}'");
    let k = kinds
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let n = limit.to_string();
    let pick = (limit * CLAIM_PICK_AHEAD).to_string();
    [
        CLAIM_SELECT.sql(&[&q, &q, &q, &q, &h, &q, &k, &k, "1", "0", &pick, &q, &n]),
        CLAIM_SELECT_PAST_LOCKED.sql(&[&q, &q, &q, &q, &h, &q, &k, &k, &n]),
    ]
}

/// Runs `sql` on `conn` after resetting the session's counters: its rows and the index entries it read
/// past the first (`Handler_read_next`).
pub async fn rows_and_read_next(
    conn: &mut sqlx::MySqlConnection,
    sql: &str,
) -> (Vec<sqlx::mysql::MySqlRow>, String) {
    sqlx::query("FLUSH STATUS")
        .execute(&mut *conn)
        .await
        .unwrap();
    let rows = sqlx::query(sql).fetch_all(&mut *conn).await.unwrap();
    let (_, read_next): (String, String) =
        sqlx::query_as("SHOW SESSION STATUS LIKE 'Handler_read_next'")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    (rows, read_next)
}

/// GETs `uri` from the dashboard's router as a browser on the machine would (Host 127.0.0.1:8080): its
/// `Refresh` header and its body.
pub async fn dashboard_get(app: &axum::Router, uri: &str) -> (Option<String>, String) {
    use tower::ServiceExt;
    let req = axum::http::Request::get(uri)
        .header(axum::http::header::HOST, "127.0.0.1:8080")
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let refresh = resp
        .headers()
        .get(axum::http::header::REFRESH)
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (refresh, String::from_utf8(bytes.to_vec()).unwrap())
}
