//! The chaos run's mixed workload: what runs the jobs, what enqueues them, and the checks of what
//! the history checker does not see (effects kept exactly once, one job per planned time, the order
//! of dependencies, a concurrency limit).
//!
//! Kinds and what each stands for:
//! - `cmd`: a command, 0.2 s; `after`: the same, enqueued to run after a `cmd` job;
//!   `sched`: the same, made by the schedule `tick` every second;
//! - `limited`: a command, 0.4 s, under `jobq_limits` of 2 at once, that checks the limit from the
//!   inside: it takes one of two slot locks, and one finding both taken records it in `over-limit`;
//! - `sql`: a procedure that records its copy on the server and watches for earlier copies still
//!   running there ([`history::recorded_procedure`]); not on the cluster, where a node's process list
//!   shows its own sessions only, so an earlier copy on another node would look gone;
//! - `txn`: a transactional procedure: its effect row commits with the job's finish or not at all;
//! - `lib`: an async Rust handler in the run's own process ([`super::library`]).
//!
//! Every command copy holds a lock of its job (`locks/<id>`) for as long as any of its processes lives.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jobq::{CancellationToken, NewJob};
use sqlx::MySqlPool;

use crate::history;

/// What the run's directory holds for the workload.
pub struct Files {
    pub effects: PathBuf,
    pub locks: PathBuf,
    pub over_limit: PathBuf,
}

impl Files {
    pub fn new(dir: &Path) -> Files {
        let locks = dir.join("locks");
        std::fs::create_dir_all(&locks).unwrap();
        Files {
            effects: dir.join("effects"),
            locks,
            over_limit: dir.join("over-limit"),
        }
    }
}

/// The config every jobq process of the run reads (without the `sql` kind on a cluster).
pub fn config(files: &Files, dir: &Path, cluster: bool) -> String {
    let lock = files.locks.join("$JOBQ_JOB_ID");
    let command = |body: &str| {
        let script = history::recorded_command(&files.effects, &lock, body);
        format!("command = [\"sh\", \"-c\", '''\n{script}''']\n")
    };
    let slots = format!(
        "exec 8>>{slot1}\nif ! flock -n 8; then exec 8>>{slot2}; if ! flock -n 8; then \
         echo \"over job=$JOBQ_JOB_ID at=$(date +%s%6N)\" >> {over}; fi; fi\nsleep 0.4",
        slot1 = dir.join("slot1").display(),
        slot2 = dir.join("slot2").display(),
        over = files.over_limit.display(),
    );
    let short = command("sleep 0.2");
    let sql = if cluster {
        ""
    } else {
        "[handlers.sql]\nsql = \"CALL sql_effect(?, ?, ?)\"\nparams = [\"$job_id\", \"$claim\", \"$attempt\"]\n\n"
    };
    format!(
        "[worker]\nconcurrency = 8\nshutdown_grace = \"20s\"\n\n\
         [retry]\nbase = \"200ms\"\ncap = \"2s\"\n\n\
         [reaper]\ninterval = \"1s\"\n\n\
         [schedules.tick]\nkind = \"sched\"\nspec = \"every 1s\"\noverlap = \"allow\"\nmisfire = \"all\"\n\n\
         [handlers.cmd]\n{short}\n[handlers.after]\n{short}\n[handlers.sched]\n{short}\n\
         [handlers.limited]\n{limited}\n{sql}\
         [handlers.txn]\nsql = \"CALL txn_effect(?, ?)\"\nparams = [\"$job_id\", \"$attempt\"]\ntransactional = true\n",
        limited = command(&slots),
    )
}

/// Creates the procedures and tables of the SQL kinds and the limit of the `limited` kind.
pub async fn install(pool: MySqlPool) {
    for ddl in [
        history::effects_table("sql_effects"),
        history::recorded_procedure("sql_effect", "sql_effects", "DO SLEEP(0.05);", true),
        "CREATE TABLE txn_effects (n BIGINT AUTO_INCREMENT PRIMARY KEY, \
         job_id BIGINT UNSIGNED NOT NULL, attempt SMALLINT UNSIGNED NOT NULL, KEY (job_id))"
            .to_string(),
        "CREATE PROCEDURE txn_effect(p_job BIGINT UNSIGNED, p_attempt SMALLINT UNSIGNED) BEGIN \
         INSERT INTO txn_effects (job_id, attempt) VALUES (p_job, p_attempt); DO SLEEP(0.02); END"
            .to_string(),
        "INSERT INTO jobq_limits (scope, name, max_jobs) VALUES ('kind', 'limited', 2)".to_string(),
    ] {
        sqlx::query(&ddl).execute(&pool).await.unwrap();
    }
}

/// Enqueues a round every half second: two each of `cmd`, `sql` (not on a cluster), `txn` and `lib`,
/// one `limited` in a plain INSERT, and a `cmd` with an `after` that waits for it, through the library.
/// A round that fails (the server is down) is counted and skipped.
pub struct Enqueuer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Enqueued>,
}

#[derive(Debug, Default)]
pub struct Enqueued {
    pub rounds: u32,
    pub failed_rounds: u32,
    /// (the job, the job that waits for it)
    pub pairs: Vec<(u64, u64)>,
}

impl Enqueuer {
    pub async fn start(url: &str, cluster: bool) -> Enqueuer {
        let pool = jobq::connect(&jobq::ConnectConfig::new(url).unwrap().max_connections(2))
            .await
            .unwrap();
        let stop = CancellationToken::new();
        let kinds = if cluster {
            "('cmd'), ('cmd'), ('txn'), ('txn'), ('lib'), ('lib'), ('limited')"
        } else {
            "('cmd'), ('cmd'), ('sql'), ('sql'), ('txn'), ('txn'), ('lib'), ('lib'), ('limited')"
        };
        let task = tokio::spawn(enqueue(pool, kinds, stop.clone()));
        Enqueuer { stop, task }
    }

    pub async fn stop(self) -> Enqueued {
        self.stop.cancel();
        self.task.await.unwrap()
    }
}

async fn enqueue(pool: MySqlPool, kinds: &str, stop: CancellationToken) -> Enqueued {
    let mut out = Enqueued::default();
    let insert = format!("INSERT INTO job_queue (kind) VALUES {kinds}");
    while !stop.is_cancelled() {
        let round = async {
            sqlx::query(&insert)
                .execute(&pool)
                .await
                .map_err(|e| e.to_string())?;
            let first = jobq::enqueue(&pool, &NewJob::new("cmd"))
                .await
                .map_err(|e| e.to_string())?;
            let then = jobq::enqueue(&pool, &NewJob::new("after").after([first]))
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((first.0, then.0))
        };
        match tokio::time::timeout(Duration::from_secs(5), round).await {
            Ok(Ok(pair)) => {
                out.rounds += 1;
                out.pairs.push(pair);
            }
            _ => out.failed_rounds += 1,
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    pool.close().await;
    out
}

/// What the workload's own checks found.
#[derive(Debug, Default)]
pub struct Kept {
    pub txn_jobs: i64,
    /// `txn` jobs with other than one effect row (done) or none (not done).
    pub txn_broken: Vec<String>,
    pub planned_runs: usize,
    /// Planned times missing, repeated, or without their one job.
    pub schedule_broken: Vec<String>,
    pub pairs: usize,
    /// Jobs that started before the job they wait for was done.
    pub order_broken: Vec<String>,
    /// Copies of `limited` that found both slots taken.
    pub over_limit: usize,
}

/// Runs the workload's checks once every job has ended.
pub async fn check(
    pool: &MySqlPool,
    files: &Files,
    h: &history::History,
    pairs: &[(u64, u64)],
) -> Kept {
    let mut kept = Kept::default();
    let txn: Vec<(u64, Vec<u8>, i64)> = sqlx::query_as(
        "SELECT j.id, CAST(j.state AS BINARY), (SELECT COUNT(*) FROM txn_effects e WHERE e.job_id = j.id) \
         FROM job_queue j WHERE j.kind = 'txn'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    kept.txn_jobs = txn.len() as i64;
    for (id, state, effects) in txn {
        let want = i64::from(state == b"done");
        if effects != want {
            let state = String::from_utf8_lossy(&state);
            kept.txn_broken
                .push(format!("job {id} is {state} with {effects} effect rows"));
        }
    }

    let runs: Vec<(chrono::DateTime<chrono::Utc>, u64, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT r.planned_at, r.job_id, CAST(j.state AS BINARY) FROM jobq_schedule_runs r \
         JOIN jobq_schedules s ON s.id = r.schedule_id LEFT JOIN job_queue j ON j.id = r.job_id \
         WHERE s.name = 'tick' ORDER BY r.planned_at",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    kept.planned_runs = runs.len();
    for w in runs.windows(2) {
        let gap = w[1].0 - w[0].0;
        if gap != chrono::TimeDelta::seconds(1) {
            kept.schedule_broken
                .push(format!("{} follows {} ({gap})", w[1].0, w[0].0));
        }
    }
    let mut jobs: Vec<u64> = runs.iter().map(|r| r.1).collect();
    jobs.sort_unstable();
    jobs.dedup();
    if jobs.len() != runs.len() {
        kept.schedule_broken.push(format!(
            "{} planned times have {} jobs",
            runs.len(),
            jobs.len()
        ));
    }
    for (at, job, state) in &runs {
        if state.as_deref() != Some(b"done".as_slice()) {
            kept.schedule_broken
                .push(format!("the run at {at} (job {job}) is not done"));
        }
    }

    kept.pairs = pairs.len();
    for &(first, then) in pairs {
        let done = h.events_of(first).into_iter().find(
            |e| matches!(&e.kind, history::Kind::FinishAccepted { outcome } if outcome == "done"),
        );
        let claimed = h
            .events_of(then)
            .into_iter()
            .find(|e| e.kind == history::Kind::Claimed);
        match (done, claimed) {
            (Some(d), Some(c)) if c.at.micros >= d.at.micros => {}
            (d, c) => kept.order_broken.push(format!(
                "job {then} claimed at {:?}, job {first} it waits for done at {:?}",
                c.map(|e| e.at.micros),
                d.map(|e| e.at.micros)
            )),
        }
    }

    kept.over_limit = std::fs::read_to_string(&files.over_limit)
        .unwrap_or_default()
        .lines()
        .count();
    kept
}
