//! The aging pass: jobs of a queue with aging (`jobq queue age`, schema 29) gain one step of priority
//! per step they have been due, so that a flood of urgent work delays less urgent work but never
//! starves it.
//!
//! Why in the reaper, and not in the workers:
//! - The claim must not pay for it. A claim orders by `priority` as it always did; the pass rewrites
//!   `priority` in the background, in small transactions that skip rows a claim holds. A worker doing
//!   the pass would put reads and writes into its claim loop, whether its queues age or not.
//! - One pass is enough, and the reaper is where the passes that only need to happen somewhere live
//!   (releasing a dead claimant's jobs, the dependency sweep, pruning). Any number of reapers may run:
//!   the pass writes a job's priority as a function of its row and the database clock
//!   (`db::aging`), so two reapers write the same value and a late pass catches up; in every worker
//!   it would be the same work done once per worker.
//! - Deployments that run only cron-started workers already need `jobq reaper --once` from cron for
//!   their dead claimants and pruning (docs/operations.md); a once-a-minute pass gives a job the steps
//!   it earned within a minute, which suits steps of minutes. Aging matters only while workers cannot
//!   keep up, and a cron worker that cannot keep up does not exit, so it would not reach a pass at its
//!   start or end either.
//!
//! The pass visits each aging queue's levels from the first one below its floor, and per level raises
//! at most [`ROWS_PER_LEVEL`](crate::db::aging::ROWS_PER_LEVEL) of the oldest due jobs; after
//! [`LEVELS_PER_PASS`] levels it stops and the next pass resumes after the last level it visited.

use std::collections::BTreeMap;

use sqlx::MySqlConnection;
use tracing::warn;

use crate::db::aging::{self, LEVELS_PER_PASS, LevelStep};
use crate::error::Result;

/// Where each queue's walk resumes: the last level visited by a pass that stopped at
/// [`LEVELS_PER_PASS`]. Kept between the passes of one reaper.
#[derive(Debug, Default)]
pub(crate) struct Cursors(std::sync::Mutex<BTreeMap<String, i16>>);

/// One aging pass over every queue with aging, on `conn`. Returns how many jobs it raised.
///
/// # Errors
/// When a statement fails; the next pass tries again.
pub(crate) async fn pass(conn: &mut MySqlConnection, cursors: &Cursors) -> Result<u64> {
    let mut raised = 0;
    for (setting, every_us) in aging::all_on(conn).await? {
        if every_us == 0 {
            warn!(queue = %setting.queue, "jobq_queue_aging: the step (every_secs) is not above \
                  one millisecond; this queue's jobs do not age until it is");
            continue;
        }
        let resume = crate::sync::lock(&cursors.0).get(&setting.queue).copied();
        let (n, stopped_at) = age_queue(conn, &setting, every_us, resume).await?;
        raised += n;
        let mut cursors = crate::sync::lock(&cursors.0);
        match stopped_at {
            Some(level) => cursors.insert(setting.queue, level),
            None => cursors.remove(&setting.queue),
        };
    }
    Ok(raised)
}

/// Ages one queue's levels below its floor, starting after `resume` if it is still below the floor.
/// Returns the jobs raised, and the level to resume after when it stopped at [`LEVELS_PER_PASS`].
async fn age_queue(
    conn: &mut MySqlConnection,
    setting: &aging::QueueAging,
    every_us: u64,
    resume: Option<i16>,
) -> Result<(u64, Option<i16>)> {
    let queue = setting.queue.as_str();
    let Some(top) = aging::top_level(conn, queue).await? else {
        return Ok((0, None));
    };
    let floor = setting.floor.map_or(top, |f| f.max(top));
    let mut after = resume.filter(|r| *r > floor).unwrap_or(floor);
    let mut raised = 0;
    for _ in 0..LEVELS_PER_PASS {
        let Some(level) = aging::next_level(conn, queue, after).await? else {
            return Ok((raised, None));
        };
        raised += aging::age_level(
            conn,
            LevelStep {
                queue,
                level,
                floor,
                every_us,
            },
        )
        .await?;
        after = level;
    }
    Ok((raised, Some(after)))
}
