//! OpenTelemetry glue (the `otel` feature; docs/traces.md): a job's [`Traceparent`] as an
//! OpenTelemetry context and back, the context of the caller's current span for an enqueue, and the
//! span of one job attempt.
//!
//! The library creates its spans with OpenTelemetry's *global* tracer, so an application that installs
//! its own tracer provider gets jobq's spans in its pipeline, and one that installs none pays for a
//! no-op span per attempt. `jobq worker` installs an OTLP exporter when one is configured
//! (`bin/jobq/otel.rs`).

use opentelemetry::trace::{
    Span, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer,
};
use opentelemetry::{Context, KeyValue, global};

use crate::Traceparent;

/// The instrumentation scope jobq's spans are recorded under.
pub const SCOPE: &str = "jobq";

/// `parent` as a remote span context: what a span started in it is a child of.
pub fn context_of(parent: Traceparent) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes(parent.trace_id()),
        SpanId::from_bytes(parent.span_id()),
        TraceFlags::new(parent.flags()),
        true,
        TraceState::default(),
    ))
}

/// The traceparent of `cx`'s span; `None` when it has no valid span.
pub fn traceparent_of(cx: &Context) -> Option<Traceparent> {
    of_span_context(cx.span().span_context())
}

/// The traceparent of a span context; `None` when it is not valid.
fn of_span_context(sc: &opentelemetry::trace::SpanContext) -> Option<Traceparent> {
    if !sc.is_valid() {
        return None;
    }
    Traceparent::new(
        sc.trace_id().to_bytes(),
        sc.span_id().to_bytes(),
        sc.trace_flags().to_u8(),
    )
    .ok()
}

/// The trace context the caller runs in: the current `tracing` span's OpenTelemetry context (with
/// tracing-opentelemetry's layer installed), else OpenTelemetry's own current context (code that uses
/// the OpenTelemetry API directly); `None` outside any span.
pub fn current_traceparent() -> Option<Traceparent> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    traceparent_of(&tracing::Span::current().context())
        .or_else(|| traceparent_of(&Context::current()))
}

/// The span of one job attempt: `jobq.job {kind}`, kind CONSUMER (it processes a message another
/// service produced), a child of the job's stored traceparent (a root span without one), with the
/// job's id, kind, queue and attempt as attributes; the outcome is added when it ends.
#[derive(Debug)]
pub(crate) struct AttemptSpan {
    span: global::BoxedSpan,
}

/// What an attempt's span records about the job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobFacts<'a> {
    pub(crate) id: u64,
    pub(crate) kind: &'a str,
    pub(crate) queue: &'a str,
    pub(crate) attempt: u16,
}

impl AttemptSpan {
    pub(crate) fn start(job: JobFacts<'_>, parent: Option<Traceparent>) -> Self {
        let tracer = global::tracer(SCOPE);
        let cx = parent.map_or_else(Context::new, context_of);
        let builder = tracer
            .span_builder(format!("jobq.job {}", job.kind))
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                KeyValue::new("jobq.job.id", job.id as i64),
                KeyValue::new("jobq.job.kind", job.kind.to_string()),
                KeyValue::new("jobq.queue", job.queue.to_string()),
                KeyValue::new("jobq.attempt", i64::from(job.attempt)),
            ]);
        Self {
            span: tracer.build_with_context(builder, &cx),
        }
    }

    /// What the attempt's handlers continue: this span's context, a child of the stored one. A no-op
    /// tracer (no provider installed) gives its parent's context back, so then the stored traceparent
    /// passes through as it is.
    pub(crate) fn traceparent(&self) -> Option<Traceparent> {
        of_span_context(self.span.span_context())
    }

    /// Ends the span with the attempt's `outcome` (the label of the `jobq_jobs_finished_total` metric:
    /// done, retry, dead, timeout, cancelled, requeued, snoozed, claim_lost) and, for an attempt that
    /// failed, an error status with its message.
    pub(crate) fn end(mut self, outcome: &'static str, error: Option<&str>) {
        self.span
            .set_attribute(KeyValue::new("jobq.outcome", outcome));
        if let Some(e) = error {
            self.span.set_status(Status::error(e.to_string()));
        }
        self.span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_traceparent_round_trips_through_a_context() {
        let t: Traceparent = PARENT.parse().unwrap();
        assert_eq!(traceparent_of(&context_of(t)), Some(t));
        assert_eq!(traceparent_of(&Context::new()), None);
    }

    /// Code that uses the OpenTelemetry API directly: its attached context is the current one.
    #[test]
    fn an_enqueue_in_a_span_takes_its_context() {
        let t: Traceparent = PARENT.parse().unwrap();
        assert_eq!(current_traceparent(), None);
        let _attached = context_of(t).attach();
        let job = crate::NewJob::new("k").in_current_span();
        assert_eq!(job.traceparent, Some(t));
    }

    /// With no tracer provider installed, an attempt's span hands on its parent as it is.
    #[test]
    fn without_a_provider_the_stored_parent_passes_through() {
        let t: Traceparent = PARENT.parse().unwrap();
        let facts = JobFacts {
            id: 1,
            kind: "k",
            queue: "default",
            attempt: 1,
        };
        let span = AttemptSpan::start(facts, Some(t));
        assert_eq!(span.traceparent(), Some(t));
        span.end("done", None);
        assert_eq!(AttemptSpan::start(facts, None).traceparent(), None);
    }
}
