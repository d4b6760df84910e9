//! The trace context of one attempt: the job's stored `traceparent` checked once, and what its
//! handlers are given. Without the `otel` feature the stored value is passed through as it is.

use tracing::warn;

use crate::Traceparent;
use crate::db::claim::ClaimedJob;

/// The job's stored `traceparent`, checked. A value the column's CHECK should have refused (a server
/// that ignores CHECK constraints, a session that turned them off) must not fail the job: it is logged
/// here, once per attempt, and the attempt runs without a parent.
pub(super) fn stored_parent(job: &ClaimedJob) -> Option<Traceparent> {
    let text = job.traceparent.as_deref()?;
    match text.parse() {
        Ok(t) => Some(t),
        Err(e) => {
            warn!(job_id = job.id.0, kind = %job.kind, attempt = job.attempt(), traceparent = ?text,
                  error = %e, "the job's traceparent is not valid W3C trace context; running it without a parent");
            None
        }
    }
}
