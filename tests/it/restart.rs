//! Restarting the database server under running workers: they reconnect and finish everything.
//!
//! The test cannot restart the shared server, so it starts a private `mariadbd` on its own port and data
//! directory (the server binary is there wherever `scripts/ensure-mariadb.sh` has run).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{jobq, scratch_dir, wait_output, wait_until, write_config};

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

struct PrivateServer {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl PrivateServer {
    fn create() -> Self {
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
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            dir,
            port,
            child: None,
        }
    }

    fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    async fn start(&mut self) {
        let log = std::fs::File::create(self.dir.join("server.log")).unwrap();
        // A tmpdir of its own: at start-up the server deletes every `#sql*` file in its tmpdir, which in
        // the shared /tmp would include the temporary tables of the other server's running queries.
        let tmp = self.dir.join("tmp");
        let child = Command::new(find(&["mariadbd", "mysqld"]))
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-grant-tables",
                "--innodb-buffer-pool-size=32M",
                "--skip-log-bin",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let url = self.url("mysql");
        wait_until("private server up", Duration::from_secs(30), || async {
            jobq::db::connect(&jobq::db::ConnectConfig::new(&url))
                .await
                .is_ok()
        })
        .await;
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
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

#[tokio::test]
async fn workers_ride_out_a_server_restart_and_finish_everything() {
    let mut server = PrivateServer::create();
    server.start().await;
    let url = server.url("jobq");
    let out = jobq(Some(&url), &["migrate", "--create-database"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pool = jobq::db::connect(&jobq::db::ConnectConfig::new(&url))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE effects (job_id BIGINT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO job_queue (kind, payload) SELECT 'effect', JSON_OBJECT('id', seq) FROM seq_1_to_3000",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let dir = scratch_dir();
    let cfg = write_config(
        &dir,
        "[handlers.effect]\n\
         sql = \"INSERT INTO effects (job_id) SELECT ? FROM DUAL WHERE SLEEP(0.002) = 0\"\n\
         params = [\"id\"]\n",
    );
    let sup = jobq(
        Some(&url),
        &[
            "supervise",
            "-n",
            "2",
            "--reaper",
            "--config",
            cfg.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();

    let count = |sql: &'static str| {
        let url = url.clone();
        async move {
            let Ok(pool) = jobq::db::connect(&jobq::db::ConnectConfig::new(&url)).await else {
                return -1;
            };
            let n: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap_or(-1);
            pool.close().await;
            n
        }
    };
    wait_until("300 jobs done", Duration::from_secs(30), || async {
        count("SELECT COUNT(*) FROM job_queue WHERE state = 'done'").await >= 300
    })
    .await;

    server.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.start().await;

    wait_until(
        "every job done after the restart",
        Duration::from_secs(90),
        || async { count("SELECT COUNT(*) FROM job_queue WHERE state = 'done'").await == 3000 },
    )
    .await;
    let missing = count(
        "SELECT COUNT(*) FROM job_queue j WHERE NOT EXISTS (SELECT 1 FROM effects e WHERE e.job_id = j.id)",
    )
    .await;
    assert_eq!(missing, 0, "every job had its effect");
    kill(Pid::from_raw(sup.id() as i32), Signal::SIGTERM).unwrap();
    let out = wait_output(sup, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM job_queue WHERE state <> 'done'").await,
        0
    );
}
