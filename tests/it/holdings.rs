//! The holdings ledger (schema 38): every running row is on its claimant's list, written by the stamp
//! that claims it; a claimant without a list stamps nothing; a list goes with its claimant.

use std::sync::Arc;
use std::time::Duration;

use jobq::{Handlers, JobContext};
use sqlx::Connection;
use tokio::sync::Semaphore;

use crate::common::{TestDb, wait_until};

/// Jobs that each wait for a permit of `gate`, so the test says when they end.
fn gated(gate: &Arc<Semaphore>) -> Handlers {
    let gate = gate.clone();
    Handlers::new()
        .register("held", move |_job: JobContext| {
            let gate = gate.clone();
            async move {
                gate.acquire().await.expect("the gate stays open").forget();
                Ok(())
            }
        })
        .unwrap()
}

/// A worker that runs eight jobs at a time while the test lets them end a few at a time: at every
/// step each running row is on the worker's list, whose length stays near what it runs, and the
/// list is gone once the worker has stopped with nothing running.
#[tokio::test]
async fn every_running_row_is_on_its_claimants_list_and_the_list_goes_with_it() {
    let db = TestDb::new().await;
    db.insert_jobs("held", 40).await;
    let gate = Arc::new(Semaphore::new(0));
    let worker = db
        .worker(gated(&gate))
        .config(|c| {
            c.concurrency = 8;
            c.batch_size = 3;
        })
        .start()
        .await;
    let mut done = 0;
    while done < 40 {
        wait_until("eight jobs running", Duration::from_secs(10), || async {
            let running: i64 = db
                .scalar("SELECT COUNT(*) FROM job_queue WHERE state = 'running'")
                .await;
            running == (40 - done).min(8)
        })
        .await;
        assert_eq!(db.unlisted_running().await, vec![], "after {done} done");
        let listed: i64 = db
            .scalar("SELECT COALESCE(MAX(JSON_LENGTH(held_ids)), 0) FROM jobq_holdings")
            .await;
        assert!(
            (8.min(40 - done)..=16).contains(&listed),
            "{listed} rows listed for 8 running"
        );
        gate.add_permits(3);
        done = (done + 3).min(40);
        wait_until("three more done", Duration::from_secs(10), || async {
            let n: i64 = db
                .scalar("SELECT COUNT(*) FROM job_queue WHERE state = 'done'")
                .await;
            n >= done
        })
        .await;
    }
    worker.stop().await;
    assert_eq!(db.states().await, "done=40");
    let lists: i64 = db.scalar("SELECT COUNT(*) FROM jobq_holdings").await;
    assert_eq!(
        lists, 0,
        "a stopped worker's list goes with its registry row"
    );
}

/// A claim writes the claimant's holdings row before it stamps: a claimant whose row is gone (a reaper
/// forgot it) has it made again by its claim, which then lists what it stamped.
#[tokio::test]
async fn a_claim_whose_list_is_gone_makes_it_again() {
    let db = TestDb::new().await;
    db.insert_jobs("k", 2).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let selected: Vec<jobq::testing::ClaimedJob> = sqlx::query_as(
        "SELECT id, queue, kind, payload, attempts, max_attempts, timeout_secs \
         FROM job_queue ORDER BY id FOR UPDATE",
    )
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    let got = jobq::testing::stamp_selected(&mut tx, "forgotten", selected)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(db.states().await, "running=2");
    assert_eq!(db.unlisted_running().await, vec![]);
}

/// A worker whose registry and holdings rows a reaper removed while it idled (it judged the worker
/// gone, wrongly) runs what comes due, and registers again.
#[tokio::test]
async fn a_worker_forgotten_while_idle_claims_and_registers_again() {
    let db = TestDb::new().await;
    let gate = Arc::new(Semaphore::new(100));
    let worker = db
        .worker(gated(&gate))
        .config(|c| {
            c.heartbeat_interval = Duration::from_millis(300);
            c.poll_interval = Duration::from_millis(50);
        })
        .start()
        .await;
    worker.settled().await;
    db.exec("DELETE FROM jobq_holdings").await;
    db.exec("DELETE FROM jobq_processes").await;
    db.insert_jobs("held", 5).await;
    wait_until("the jobs done", Duration::from_secs(10), || async {
        db.states().await == "done=5"
    })
    .await;
    // Idle again: its heartbeat, written by its waits, still notices within a few intervals.
    wait_until("registered again", Duration::from_secs(5), || async {
        db.scalar::<i64>(
            "SELECT COUNT(*) FROM jobq_processes p JOIN jobq_holdings h ON h.holder = p.token",
        )
        .await
            == 1
    })
    .await;
    worker.stop().await;
}

/// Rows stamped by plain SQL (as a worker of a jobq older than schema 38 stamps them during an
/// upgrade) are on no list. The reaper's sweep walks the table a stretch of ids a pass and lists them,
/// so their dead claimant is judged and its rows reset like any other's; it also drops the lists of
/// claimants that are gone and name nothing running.
#[tokio::test]
async fn the_reapers_sweep_lists_rows_stamped_by_hand_and_drops_lists_of_no_one() {
    let db = TestDb::new().await;
    // Rows 1 to 3, and row 100,000: further on than one pass reads.
    db.exec("INSERT INTO job_queue (id, kind) VALUES (1, 'k'), (2, 'k'), (3, 'k'), (100000, 'k')")
        .await;
    let token = "ghost-host:1:1:1-1:00000000000000aa";
    db.exec(&format!(
        "UPDATE job_queue SET state = 'running', claim = '{token}', attempts = 1, \
         claimed_at = NOW(6) - INTERVAL 1 HOUR, started_at = NOW(6) - INTERVAL 1 HOUR \
         WHERE id IN (1, 2, 100000)"
    ))
    .await;
    db.exec("INSERT INTO jobq_holdings (holder, held_ids) VALUES ('ghost-gone', '[3]')")
        .await;
    assert_eq!(db.unlisted_running().await.len(), 3);
    let reaper = db.reaper();

    let first = reaper.run_once().await.unwrap();
    assert_eq!(
        (first.unlisted, first.dead_claimants, first.requeued),
        (2, 1, 2),
        "{first:?}"
    );
    assert_eq!(
        db.unlisted_running().await,
        vec![(100000, token.to_string())]
    );
    let lists: i64 = db
        .scalar("SELECT COUNT(*) FROM jobq_holdings WHERE holder = 'ghost-gone'")
        .await;
    assert_eq!(
        lists, 0,
        "the list of a claimant that is gone and runs nothing"
    );

    let second = reaper.run_once().await.unwrap();
    assert_eq!(
        (second.unlisted, second.dead_claimants, second.requeued),
        (1, 1, 1),
        "{second:?}"
    );
    assert_eq!(db.unlisted_running().await, vec![]);
    assert_eq!(db.states().await, "queued=4");
    let lists: i64 = db.scalar("SELECT COUNT(*) FROM jobq_holdings").await;
    assert_eq!(lists, 0, "a reset claimant's list goes with it");

    // The walk starts over: nothing more to list.
    let third = reaper.run_once().await.unwrap();
    assert_eq!(third.unlisted, 0, "{third:?}");
}
