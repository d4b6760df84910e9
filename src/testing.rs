//! Internals the integration tests drive directly (a claim without a worker, a fenced finish, the
//! fence's margin and kill grace, which the protocol model in tests/model checks, how a process is
//! judged) and the events they wait on ([`Signals`]), behind the `test-util` feature: they are not
//! part of the public API and may change with any release.

pub use crate::claimant::fence::{KILL_GRACE, MARGIN};
pub use crate::claimant::liveness::{ProcessState, local_process};
pub use crate::claimant::token::ProcessIdentity;
pub use crate::db::claim::{ClaimedJob, claim_batch, claim_batch_carrying, stamp_selected};
pub use crate::db::finish::Finish;
pub use crate::worker::signals::{Counts, Signals};

/// One job by id (as [`crate::Jobs::get`]), for tests that name ids as numbers.
pub async fn get_job(
    pool: &sqlx::MySqlPool,
    id: impl Into<crate::JobId>,
) -> crate::Result<crate::JobRecord> {
    crate::db::admin::get_job(pool, id.into()).await
}

/// Applies `outcome` to job `id` if the row still carries `token` (any text) and `attempt`, as a
/// worker's fenced finish does. False when the fence did not match.
pub async fn finish(
    pool: &sqlx::MySqlPool,
    id: crate::JobId,
    token: &str,
    attempt: u16,
    outcome: &Finish,
) -> crate::Result<bool> {
    let token = crate::claimant::token::TokenText::from(token);
    crate::db::finish::finish(pool, id, &token, attempt, outcome).await
}

/// One priority aging pass over every queue with aging, on `conn` (as a reaper's pass makes it, from
/// the first level of each queue): how many jobs it raised. On a connection of the test's own, so that
/// it can count what the pass read.
pub async fn age_priorities(conn: &mut sqlx::MySqlConnection) -> crate::Result<u64> {
    crate::reaper::aging::pass(conn, &Default::default()).await
}

/// A reaper's reset of claimant `token`'s running rows, going ahead only while its registry row still
/// shows heartbeat `seen` (`None`: no row), as a pass makes it after judging the claimant gone: the ids
/// it reset, or `None` when the claimant came back first and nothing changed.
pub async fn reset_if_heartbeat_unchanged(
    pool: &sqlx::MySqlPool,
    token: &str,
    seen: Option<chrono::DateTime<chrono::Utc>>,
) -> crate::Result<Option<Vec<u64>>> {
    let only_if = crate::db::reap::ResetIf::HeartbeatUnchanged(seen);
    let reset = crate::db::reap::reset_claim(pool, token, "test reset", only_if).await?;
    Ok(reset.map(|jobs| jobs.into_iter().map(|j| j.id).collect()))
}
