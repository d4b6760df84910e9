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
use crate::history::{self, At, Expectations, History, assert_clean};

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
    for ddl in [
        history::effects_table("effects"),
        // Each copy records its start and end around a short statement; see the comment at the
        // restart for why earlier copies are not watched from inside the procedure here.
        history::recorded_procedure("effect", "effects", "DO SLEEP(0.002);", false),
    ] {
        sqlx::query(&ddl).execute(&pool).await.unwrap();
    }
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
         sql = \"CALL effect(?, ?, ?)\"\n\
         params = [\"$job_id\", \"$claim\", \"$attempt\"]\n",
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

    // The restart ends every session, and with them the statements running then: such a copy is
    // cut short, or ran to its end with its reply lost, and its attempt fails (retry) and runs again
    // on the same workers, which live on. An SQL handler that is not transactional promises no more
    // than that. So the workers registered now are the claimants the test cannot avoid losing copies
    // of; every such rerun must come from a copy started before the server stopped (checked below).
    // The procedure does not watch for earlier copies itself, since connection ids start again after
    // the restart; once the server has stopped, the test knows every copy started before is gone.
    let lost = {
        let pool = jobq::connect(&jobq::ConnectConfig::new(&url).unwrap())
            .await
            .unwrap();
        let tokens = history::worker_tokens(&pool).await;
        pool.close().await;
        tokens
    };
    assert_eq!(lost.len(), 2, "both workers registered: {lost:?}");
    server.stop();
    let stopped_at = At::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.start().await;

    wait_until(
        "every job done after the restart",
        Duration::from_secs(90),
        || async { count("SELECT COUNT(*) FROM job_queue WHERE state = 'done'").await == 3000 },
    )
    .await;
    kill(Pid::from_raw(sup.id() as i32), Signal::SIGTERM).unwrap();
    let out = wait_output(sup, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pool = jobq::connect(&jobq::ConnectConfig::new(&url).unwrap())
        .await
        .unwrap();
    let mut h = History::default();
    h.read_sql_effects(&pool, "effects").await;
    h.read_database(&pool).await;
    pool.close().await;
    h.saw_every_copy_gone(stopped_at);
    let expect = lost
        .iter()
        .fold(Expectations::no_faults(), |e, token| e.lost(token));
    let summary = assert_clean(&h, &expect);
    eprintln!("{summary:?}");
    assert_eq!((summary.jobs, summary.done), (3000, 3000), "every job done");
    let without_effect = h.jobs_without_a_whole_copy();
    let rerun_after: Vec<u64> = h
        .jobs()
        .into_iter()
        .filter(|&job| {
            let copies = h.copies(job);
            copies[..copies.len().saturating_sub(1)]
                .iter()
                .any(|c| c.start.micros > stopped_at.micros)
        })
        .collect();
    assert!(
        rerun_after.is_empty(),
        "jobs run again for a copy started after the restart: {rerun_after:?}"
    );
    assert!(
        without_effect.is_empty(),
        "jobs done without a copy that ran to its end: {without_effect:?}"
    );
}
