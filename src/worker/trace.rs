//! The trace context of one attempt: the job's stored `traceparent` checked once, what its handlers
//! are given, and (with the `otel` feature) the attempt's span, ended with its outcome.

use tracing::warn;

use crate::Traceparent;
use crate::db::claim::ClaimedJob;
use crate::db::finish::Finish;

/// One attempt's trace: without the `otel` feature only the stored traceparent, passed through.
#[derive(Debug)]
pub(super) struct AttemptTrace {
    handed: Option<Traceparent>,
    #[cfg(feature = "otel")]
    span: crate::otel::AttemptSpan,
}

impl AttemptTrace {
    /// Starts the attempt's trace (its span, with the `otel` feature) as its handler is about to run.
    pub(super) fn start(job: &ClaimedJob) -> Self {
        let parent = stored_parent(job);
        #[cfg(feature = "otel")]
        {
            let span = crate::otel::AttemptSpan::start(
                crate::otel::JobFacts {
                    id: job.id.0,
                    kind: &job.kind,
                    queue: &job.queue,
                    attempt: job.attempt(),
                },
                parent,
            );
            Self {
                handed: span.traceparent(),
                span,
            }
        }
        #[cfg(not(feature = "otel"))]
        Self { handed: parent }
    }

    /// What the attempt's handlers continue ([`crate::JobContext::traceparent`]).
    pub(super) fn traceparent(&self) -> Option<Traceparent> {
        self.handed
    }

    /// Ends the attempt's span with its outcome label and, when the attempt failed, its error.
    pub(super) fn end(self, outcome: &'static str, finish: Option<&Finish>) {
        #[cfg(feature = "otel")]
        self.span.end(outcome, failure(finish));
        #[cfg(not(feature = "otel"))]
        let _ = (outcome, finish);
    }
}

/// The error an attempt's span carries: a failure's message. A cancel, a hand-back or a snooze is not
/// an error of the job's.
#[cfg(feature = "otel")]
fn failure(finish: Option<&Finish>) -> Option<&str> {
    match finish? {
        Finish::Retry { error, .. } | Finish::Dead { error } => Some(error),
        _ => None,
    }
}

/// The job's stored `traceparent`, checked. The column takes any text (schema 25 says why), and a
/// malformed value must not fail the job: it is logged here, once per attempt, and the attempt runs
/// without a parent.
fn stored_parent(job: &ClaimedJob) -> Option<Traceparent> {
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
