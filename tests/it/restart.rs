//! Restarting the database server under running workers: they reconnect and finish everything.
//!
//! The test cannot restart the shared server, so it starts a private `mariadbd` on its own port and data
//! directory (the server binary is there wherever `scripts/ensure-mariadb.sh` has run).

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{
    PrivateServer, ServerSetup, jobq, scratch_dir, wait_output, wait_until, write_config,
};

#[tokio::test]
async fn workers_ride_out_a_server_restart_and_finish_everything() {
    let mut server = PrivateServer::create(ServerSetup::default());
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
    let pool = jobq::connect(&jobq::ConnectConfig::new(&url).unwrap())
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
            let Ok(pool) = jobq::connect(&jobq::ConnectConfig::new(&url).unwrap()).await else {
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
