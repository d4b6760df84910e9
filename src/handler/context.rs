//! What a handler knows about the job it runs ([`JobContext`]), and who made the job's done finish.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::JobError;

/// What a handler knows about the job it runs.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// Row id.
    pub id: crate::job::JobId,
    /// Job kind.
    pub kind: String,
    /// Queue it came from.
    pub queue: String,
    /// This attempt, starting at 1.
    pub attempt: u16,
    /// Attempts allowed: the job's own `max_attempts`, else its handler's, else 20.
    pub max_attempts: u16,
    /// The claim token on the row while this attempt runs. Together with `attempt` it fences side
    /// effects: `UPDATE … WHERE id = ? AND claim = ? AND attempts = ?` in the handler's own transaction
    /// changes nothing if the claim has been lost.
    pub claim: String,
    pub(crate) payload: String,
    pub(crate) cancel: CancellationToken,
    /// When the attempt must have ended: its start plus the job's timeout, by the worker's clock.
    pub(crate) deadline: chrono::DateTime<chrono::Utc>,
    /// When the job was due: the claim's time less how long the row had been due then.
    pub(crate) run_at: chrono::DateTime<chrono::Utc>,
    /// Who made the job's done finish, when not the worker (see [`Finished`]).
    pub(crate) finished: Arc<AtomicU8>,
    /// Writes its progress and output.
    pub(crate) report: super::Reporter,
    /// The trace context to hand on (see [`JobContext::traceparent`]).
    pub(crate) traceparent: Option<crate::Traceparent>,
}

/// Who made a job's done finish when its handler returned `Ok(())`, as a [`JobContext`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Finished {
    /// Nobody yet: the worker finishes the job.
    ByWorker = 0,
    /// [`JobContext::finish_in`] changed the row in the handler's transaction.
    InTransaction = 1,
    /// The application said it did ([`JobContext::finished_by_application`]); the worker checks.
    ByApplication = 2,
}

impl Finished {
    pub(crate) fn of(cell: &AtomicU8) -> Self {
        match cell.load(Ordering::SeqCst) {
            1 => Self::InTransaction,
            2 => Self::ByApplication,
            _ => Self::ByWorker,
        }
    }
}

impl JobContext {
    /// The payload as JSON text, exactly as stored.
    pub fn payload_str(&self) -> &str {
        &self.payload
    }

    /// The payload decoded into `T`. A payload of the wrong shape fails the job for good (retrying
    /// cannot change it).
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        serde_json::from_str(&self.payload).map_err(|e| {
            JobError::fatal(format!(
                "payload does not fit {}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }

    /// Ends this job `done` inside the caller's own transaction on `conn`, fenced by the claim token
    /// and attempt: transactional completion. Commit it with the job's effects and they happen exactly
    /// once, however the worker dies or loses its claim: a copy whose claim was taken away gets `false`
    /// here and must roll back, and a worker killed before the commit leaves neither the effects nor the
    /// finish. Then the worker does not finish the job itself.
    ///
    /// On `Ok(true)`, commit and return `Ok(())` (if the commit fails, return the error: the worker's
    /// own fenced finish then records the failure, or does nothing if the commit went through after
    /// all). On `Ok(false)`, roll back and return an error: the job belongs to another attempt now.
    ///
    /// # Errors
    /// The driver's error; roll back and return it.
    pub async fn finish_in(
        &self,
        conn: &mut sqlx::MySqlConnection,
    ) -> std::result::Result<bool, sqlx::Error> {
        let done = crate::db::finish::done_in(
            conn,
            self.id,
            &crate::claimant::token::TokenText::from(self.claim.as_str()),
            self.attempt,
        )
        .await?;
        if done {
            self.finished
                .store(Finished::InTransaction as u8, Ordering::SeqCst);
        }
        Ok(done)
    }

    /// Says that the application finished this job itself, in its own transaction next to its own
    /// writes, with `CALL jobq_finish(id, claim, attempt)` (schema 21): what an HTTP or process handler
    /// calls when the application answers so. Return `Ok(())` after it. The worker then does not finish
    /// the job but reads the row: a row that no longer carries this claim was finished (its dependents
    /// are released then); a row that still does was not (the application's transaction rolled back, or
    /// it never called the procedure), and the attempt fails with an error that says so, so that its
    /// effects are not taken as done.
    pub fn finished_by_application(&self) {
        self.finished
            .store(Finished::ByApplication as u8, Ordering::SeqCst);
    }

    /// Reports how far the job has got: `percent` from 0 to 100, and a short message (at most 255
    /// characters) or `None`. Shown by `jobq jobs show`, the dashboard's job page and the API while the
    /// job runs and after. Written at most once a second, however often it is called: a report made
    /// sooner is written when the second is up, and before the job's outcome, so the last one always
    /// shows. Fenced like a finish: a copy whose claim was lost changes nothing. A failed write is
    /// logged, not returned (progress is for people watching; the job goes on).
    ///
    /// ```no_run
    /// # async fn import(job: jobq::JobContext) -> Result<(), jobq::JobError> {
    /// let rows = 10_000;
    /// for done in (0..=rows).step_by(500) {
    ///     job.progress(done as f64 * 100.0 / rows as f64, Some(&format!("row {done} of {rows}")))
    ///         .await?;
    /// }
    /// job.output(&serde_json::json!({"imported": rows})).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A fatal [`JobError`] for a percent outside 0 to 100 or a longer message: a bug to fix, not a
    /// condition to retry.
    pub async fn progress(&self, percent: f64, message: Option<&str>) -> Result<(), JobError> {
        self.report
            .progress(percent, message.map(str::to_string))
            .await
    }

    /// Leaves `output` on the job: JSON of at most 64 KiB that stays with the row after the job ends,
    /// until it is pruned (`jobq jobs output ID`, the job's page, `GET /api/jobs/{id}`). A later call
    /// replaces it. Written at once, fenced like a finish.
    ///
    /// # Errors
    /// A fatal [`JobError`] for output that does not serialize or is over 64 KiB; a retry one when it
    /// could not be written (the database failed, or the claim was lost).
    pub async fn output<T: serde::Serialize + ?Sized>(&self, output: &T) -> Result<(), JobError> {
        let json = serde_json::to_string(output)
            .map_err(|e| JobError::fatal(format!("the output does not serialize to JSON: {e}")))?;
        self.report.output(json).await
    }

    /// When this attempt must have ended: its start plus the job's timeout (the row's `timeout_secs`,
    /// else its handler's, else the worker's default), by the worker's clock. The worker cancels the
    /// attempt then ([`JobContext::cancelled`]); a handler that calls elsewhere passes it on.
    pub fn deadline(&self) -> chrono::DateTime<chrono::Utc> {
        self.deadline
    }

    /// The W3C trace context this attempt runs in, for the handler to pass on (as the `traceparent`
    /// header of its own calls, or as the parent of its own spans): the context of the attempt's span
    /// when the worker exports spans (a child of the enqueuer's; docs/traces.md), else the job's
    /// stored `traceparent` as it is. `None` for a job enqueued without one, or whose stored value is
    /// not valid (the worker logs that once per attempt). Command handlers get it as `TRACEPARENT`,
    /// HTTP handlers as the `traceparent` header, process handlers as the message's `"traceparent"`,
    /// SQL handlers as `$traceparent`.
    pub fn traceparent(&self) -> Option<crate::Traceparent> {
        self.traceparent
    }

    /// [`JobContext::traceparent`] as an OpenTelemetry context (the `otel` feature), for the handler's
    /// own spans: `tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, job.otel_context())`,
    /// or `tracer.start_with_context(name, &job.otel_context())`. An empty context without one.
    #[cfg(feature = "otel")]
    pub fn otel_context(&self) -> opentelemetry::Context {
        self.traceparent
            .map_or_else(opentelemetry::Context::new, crate::otel::context_of)
    }

    /// When the job was due: the time of its claim less how long the row had been due then (measured by
    /// the database's clock), to the microsecond.
    pub fn run_at(&self) -> chrono::DateTime<chrono::Utc> {
        self.run_at
    }

    /// Resolves when the job should stop: its timeout passed, the worker is shutting down for good, or an
    /// operator cancelled it. Long handlers should select on it and return promptly.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// True once [`JobContext::cancelled`] has resolved.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The cancellation token itself, to hand to code that takes one.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// A context for tests and examples that call a handler directly.
    pub fn for_test(kind: &str, payload: &str) -> Self {
        Self {
            id: crate::job::JobId(1),
            kind: kind.into(),
            queue: "default".into(),
            attempt: 1,
            max_attempts: 1,
            claim: "test".into(),
            payload: payload.into(),
            cancel: CancellationToken::new(),
            deadline: chrono::Utc::now() + chrono::Duration::minutes(30),
            run_at: chrono::Utc::now(),
            finished: Arc::default(),
            report: super::Reporter::default(),
            traceparent: None,
        }
    }

    /// This context with `parent` as its [`traceparent`](JobContext::traceparent), for tests that call
    /// a handler directly.
    pub fn with_traceparent(mut self, parent: Option<crate::Traceparent>) -> Self {
        self.traceparent = parent;
        self
    }
}
