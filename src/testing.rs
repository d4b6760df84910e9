//! Internals the integration tests drive directly (a claim without a worker, a fenced finish, the
//! fence's margin, how a process is judged), behind the `test-util` feature: they are not part of the
//! public API and may change with any release.

pub use crate::db::claim::{ClaimedJob, claim_batch, claim_batch_carrying, stamp_selected};
pub use crate::db::finish::{Finish, finish};
pub use crate::fence::MARGIN;
pub use crate::liveness::{ProcessState, local_process};
pub use crate::token::ProcessIdentity;

/// One job by id (as [`crate::Jobs::get`]), for tests that name ids as numbers.
pub async fn get_job(
    pool: &sqlx::MySqlPool,
    id: impl Into<crate::JobId>,
) -> crate::Result<crate::JobRecord> {
    crate::db::admin::get_job(pool, id.into()).await
}
