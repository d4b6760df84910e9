//! The job to insert, as the builder [`NewJob`] that applications fill in. The checks it passes before
//! anything is sent are in `checks.rs`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::job::JobId;
use crate::traceparent::Traceparent;

/// A job to insert. Only the kind is required; everything else has the table's default.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub(crate) kind: String,
    pub(crate) payload: String,
    pub(crate) queue: Option<String>,
    pub(crate) priority: Option<i16>,
    pub(crate) run_at: Option<RunAt>,
    pub(crate) max_attempts: Option<u16>,
    pub(crate) timeout_secs: Option<u32>,
    pub(crate) unique_key: Option<String>,
    pub(crate) unique_for: Option<Duration>,
    pub(crate) debounce: Option<Debounce>,
    pub(crate) order_key: Option<String>,
    /// With `order_key`: how many jobs of the key may run at once (1: one at a time, in order).
    pub(crate) order_lanes: u16,
    /// With `order_key`: at most this many jobs of the key start per this long ([`NewJob::fair_rate`]).
    pub(crate) order_rate: Option<(u32, Duration)>,
    /// With `order_key`: a job of the key that ends dead holds the key (see [`NewJob::order_halt`]).
    pub(crate) order_halt: bool,
    pub(crate) after: Vec<u64>,
    /// With `after`: wait until those jobs have ended in any way (a batch's callback), not until done.
    pub(crate) after_ended: bool,
    /// The trace context it was enqueued under (schema 25), checked when set.
    pub(crate) traceparent: Option<Traceparent>,
}

/// A debounced job's window and maximum wait ([`NewJob::debounce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Debounce {
    /// How long after the last enqueue of the key the job runs.
    pub(crate) window: Duration,
    /// How long after the first enqueue it runs at the latest, however many follow.
    pub(crate) max: Duration,
}

/// The maximum wait of a debounced job that sets none, in windows: without one, a key enqueued more
/// often than its window would never run.
pub(crate) const DEBOUNCE_MAX_WINDOWS: u32 = 10;

/// The most jobs of one [fair key](NewJob::fair_key) that may run at once: an enqueue locks one row per
/// lane of its key.
pub(crate) const MAX_LANES: u16 = 64;

/// When a job becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunAt {
    /// At this instant.
    At(DateTime<Utc>),
    /// This long after the database's `NOW(6)` at insert time (so client clock skew does not matter).
    After(Duration),
}

impl NewJob {
    /// A job of `kind` with an empty object as payload.
    pub fn new(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            payload: "{}".into(),
            queue: None,
            priority: None,
            run_at: None,
            max_attempts: None,
            timeout_secs: None,
            unique_key: None,
            unique_for: None,
            debounce: None,
            order_key: None,
            order_lanes: 1,
            order_rate: None,
            order_halt: false,
            after: Vec::new(),
            after_ended: false,
            traceparent: None,
        }
    }

    /// Jobs this one waits for: it stays `waiting` (not claimable) until every one of them is done,
    /// and is cancelled, naming which, if one of them ends dead or cancelled. The jobs must exist
    /// already, so dependencies never form a cycle. A reaper pass releases it (every 2 s by default):
    /// run a reaper. At most 1,000; not with a unique key.
    pub fn after(mut self, jobs: impl IntoIterator<Item = JobId>) -> Self {
        self.after = jobs.into_iter().map(|id| id.0).collect();
        self.after.sort_unstable();
        self.after.dedup();
        self.after_ended = false;
        self
    }

    /// A batch's callback: this job waits until every job of `members` has *ended* (done, dead or
    /// cancelled), then runs once, with their outcome counts added to its payload as
    /// `"jobq_batch": {"done": 8, "dead": 1, "cancelled": 1}` (the payload must be a JSON object). It is
    /// never cancelled by a member's failure. Like [`NewJob::after`], the members must exist already,
    /// and a reaper pass releases it.
    pub fn after_all_ended(mut self, members: impl IntoIterator<Item = JobId>) -> Self {
        self = self.after(members);
        self.after_ended = true;
        self
    }

    /// Sets the payload from any serializable value.
    pub fn payload<T: serde::Serialize>(mut self, value: &T) -> Result<Self> {
        self.payload = serde_json::to_string(value).map_err(Error::Payload)?;
        Ok(self)
    }

    /// Sets the payload from JSON text, which is checked here so the error names the payload rather than
    /// the server's CHECK constraint.
    pub fn payload_json(mut self, text: &str) -> Result<Self> {
        serde_json::from_str::<serde_json::Value>(text).map_err(Error::Payload)?;
        self.payload = text.to_string();
        Ok(self)
    }

    /// The queue (default `default`).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// The W3C `traceparent` the job is enqueued under (`00-<trace id>-<span id>-<flags>`): every
    /// attempt's handlers receive it, and a worker that exports spans makes each attempt's span a child
    /// of it (docs/traces.md). Checked here, so the error names the value rather than the column's
    /// CHECK.
    ///
    /// # Errors
    /// [`Error::Traceparent`] when `value` is not a valid version-00 traceparent.
    pub fn traceparent(mut self, value: &str) -> Result<Self> {
        let parsed = value.parse().map_err(|source| Error::Traceparent {
            value: value.to_string(),
            source,
        })?;
        self.traceparent = Some(parsed);
        Ok(self)
    }

    /// [`NewJob::traceparent`] from the caller's current span (the `otel` feature): the current
    /// `tracing` span's OpenTelemetry context when tracing-opentelemetry's layer is installed, else
    /// OpenTelemetry's current context; no parent outside any span. Explicit rather than automatic:
    /// an enqueue is not always part of what its caller is tracing (a schedule's tick, an import
    /// loop), and a trace link that was never asked for cannot be told from one that was.
    #[cfg(feature = "otel")]
    pub fn in_current_span(self) -> Self {
        self.trace_parent(crate::otel::current_traceparent())
    }

    /// [`NewJob::traceparent`] from a value already checked (or `None`: no parent).
    pub fn trace_parent(mut self, parent: Option<Traceparent>) -> Self {
        self.traceparent = parent;
        self
    }

    /// Priority: smaller runs first (default 0).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Due at this instant (default: now).
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(RunAt::At(at));
        self
    }

    /// Due this long after the insert, by the database's clock.
    pub fn run_in(mut self, delay: Duration) -> Self {
        self.run_at = Some(RunAt::After(delay));
        self
    }

    /// Attempts before the job is dead (default 20).
    pub fn max_attempts(mut self, n: u16) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Maximum run time of one attempt (default: the handler's, else the worker's), in whole seconds,
    /// rounded up.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout_secs = Some(crate::job::timeout_secs(t));
        self
    }

    /// A unique key: while a job of the same kind with this key is queued, waiting to retry or running,
    /// enqueueing another returns that job instead of inserting
    /// ([`enqueue_unique`](super::enqueue_unique) says which happened).
    /// Keys are unique within a kind (jobs of two kinds may hold the same key at once) and compared byte
    /// for byte; at most 255 bytes. Done, dead and cancelled jobs free it,
    /// unless [`unique_for`](Self::unique_for) says otherwise.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// Also return a done job with the same key if it finished less than `period` ago (by the database's
    /// clock), e.g. "at most one report per hour". This is a look-up (a locking read of the key's rows
    /// still in the table) before the insert, not a constraint: a job with the key that is enqueued,
    /// claimed and finished entirely between another enqueuer's look-up and its insert is not seen, and
    /// both run. A live job is never duplicated, period or not. Needs a unique key.
    pub fn unique_for(mut self, period: Duration) -> Self {
        self.unique_for = Some(period);
        self
    }

    /// Debounces the job by its [unique key](Self::unique_key): while a job of its kind with the key is
    /// queued and has not started, enqueueing another replaces that job's payload and moves its run to
    /// `window` after this enqueue, never later than [`debounce_max`](Self::debounce_max) after the
    /// first (ten windows unless set). A burst of enqueues of one key becomes one
    /// job, run once the burst is over, with the last payload
    /// ([`enqueue_unique`](super::enqueue_unique) answers [`Merged`](super::Enqueued::Merged)).
    ///
    /// Unlike a plain unique key, the key does not hold while the job runs: a running job has read its
    /// payload, so an enqueue then queues a new job, which the next ones merge into. The key is kept in
    /// the `debounce_key` column (docs/debounce.md gives the plain SQL). Needs a unique key; not with
    /// [`unique_for`](Self::unique_for), a due time or dependencies.
    pub fn debounce(mut self, window: Duration) -> Self {
        let max = self
            .debounce
            .map_or(window.saturating_mul(DEBOUNCE_MAX_WINDOWS), |d| d.max);
        self.debounce = Some(Debounce { window, max });
        self
    }

    /// The longest a debounced job waits after the first enqueue of its key, however many follow
    /// (default: ten windows). Needs [`debounce`](Self::debounce), given before
    /// or after.
    pub fn debounce_max(mut self, max: Duration) -> Self {
        let window = self.debounce.map_or(Duration::ZERO, |d| d.window);
        self.debounce = Some(Debounce { window, max });
        self
    }

    /// An order key: jobs with the same key run one at a time, in the order they were enqueued, while
    /// jobs of other keys run beside them (webhooks per endpoint, postings per account). The job waits
    /// (`waiting`) until the job enqueued before it with the key has ended: through that job's retries,
    /// and, once it has ended dead or cancelled, it runs (see [`order_halt`](Self::order_halt) to hold
    /// the key instead). Keys are compared byte for byte, at most 255 bytes, across kinds and queues.
    /// Not with a unique key, debounce or dependencies; [`enqueue_many`](super::enqueue_many) refuses
    /// ordered jobs.
    pub fn order_key(mut self, key: impl Into<String>) -> Self {
        self.order_key = Some(key.into());
        self.order_lanes = 1;
        self
    }

    /// A fair share: at most `max` jobs with this key run at once (1 to 64), "at most 2
    /// running per customer". The key's jobs are spread over `max` lanes, each run in order as an
    /// [order key](Self::order_key)'s are; the others wait outside the claim index, so one key's
    /// 100,000 jobs hold at most `max` places among the due jobs, and a job released when the one
    /// before it ends is put behind the jobs already due: keys take turns. Give one key the same
    /// `max` wherever it is enqueued.
    pub fn fair_key(mut self, key: impl Into<String>, max: u16) -> Self {
        self.order_key = Some(key.into());
        self.order_lanes = max;
        self
    }

    /// With [`order_key`](Self::order_key) or [`fair_key`](Self::fair_key): at most `n` jobs of the key
    /// start per `per` ("100 a minute per customer"), spaced evenly: each lane starts a job at least
    /// `per × lanes / n` after the one before it in the lane started. The spacing is kept when a job
    /// is released (its run_at is moved), so no claim reads anything more; within any one `per` at most
    /// `n` plus the number of lanes start. Give one key the same rate wherever it is enqueued.
    pub fn fair_rate(mut self, n: u32, per: Duration) -> Self {
        self.order_rate = Some((n, per));
        self
    }

    /// The spacing a lane keeps between the starts of its jobs, in µs, for [`fair_rate`](Self::fair_rate).
    pub(crate) fn order_spacing_us(&self) -> Option<u64> {
        let (n, per) = self.order_rate?;
        let us = per.as_micros() * u128::from(self.order_lanes) / u128::from(n.max(1));
        Some(us.min(u128::from(u64::MAX)) as u64)
    }

    /// With [`order_key`](Self::order_key): when this job ends dead, the jobs after it wait until an
    /// operator retries it (it runs again, first), cancels it or deletes it, instead of going on without
    /// it: for work whose order matters more than its progress (postings to one account).
    pub fn order_halt(mut self, halt: bool) -> Self {
        self.order_halt = halt;
        self
    }

    /// The debounce settings, for the statement builders.
    pub(super) fn debounced(&self) -> Option<Debounce> {
        self.debounce
    }
}
