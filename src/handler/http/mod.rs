//! HTTP handlers: each job is POSTed to the application's own endpoint (`[handlers.KIND] url = …`).
//!
//! The request is one JSON document (the job's id, kind, queue, attempt, claim, payload, run_at and
//! deadline) with the same facts in `Jobq-*` headers, signed with `Jobq-Signature` when the handler has
//! a secret ([`sign`]). The answer decides the outcome (the `answer` module's table): 2xx is done, 429/503 with
//! `Retry-After` snooze, 408/5xx and connection errors retry, other 4xx are dead at once.
//!
//! **One client per handler**, pooled (hyper-util's client: keep-alive, HTTP/1.1, and HTTP/2 where a TLS
//! server offers it by ALPN), with at most `max_connections` requests in flight and as many idle
//! connections kept. Redirects are never followed: a 3xx fails the attempt naming its `Location`.
//!
//! **A request never outlives its attempt.** It must end by the job's deadline ([`JobContext::deadline`]);
//! on cancel (operator, timeout, shutdown) the handler drops it, and so does the worker when it drops
//! the handler's task after a fence or a lost claim. Dropping a request's future closes its HTTP/1
//! connection (hyper's dispatcher sees the answer is no longer wanted and shuts the connection down;
//! over HTTP/2 the stream is reset), so the application sees the connection close. It may still be
//! running then: it fences its own writes with the claim and attempt, or finishes the job in its own
//! transaction with `CALL jobq_finish(id, claim, attempt)` and answers `{"finished": true}`.

pub(crate) mod answer;
pub mod sign;
mod spec;

pub use spec::HttpSpec;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderValue, LOCATION, RETRY_AFTER};
use hyper::{Method, Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

pub use answer::DEFAULT_429_SNOOZE;

use super::{BoxFuture, Handler, JobContext, JobError};
use answer::{Answer, Verdict};

/// Requests one HTTP handler has in flight at most (and idle connections it keeps), unless `max_connections` says
/// otherwise: the worker's default concurrency is below it, so by default it only bounds a worker
/// configured wider, where a burst of jobs would otherwise open a burst of connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// How long an idle pooled connection is kept: below the 5 s keep-alive timeout of Apache's and
/// Node.js's defaults, so that a request is seldom written into a connection the server is closing at
/// that moment (a request that races such a close fails its attempt).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// How much of an answer's body is read: enough for `{"finished": true}`, an output of 64 KiB of JSON
/// (whose strings may be escaped past that) and an error's excerpt. The rest is not read, and the
/// connection is closed instead of reused.
const BODY_LIMIT: usize = 160 * 1024;

/// POSTs each job to one URL. Cloning shares the connection pool.
#[derive(Clone)]
pub struct HttpHandler {
    inner: Arc<Inner>,
}

struct Inner {
    url: Uri,
    shown: String,
    headers: HeaderMap,
    secret: Option<Vec<u8>>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    slots: Arc<Semaphore>,
    retry_statuses: Vec<u16>,
}

impl std::fmt::Debug for HttpHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret, nor header values (an Authorization).
        f.debug_struct("HttpHandler")
            .field("url", &self.inner.shown)
            .field("headers", &self.inner.headers.keys().collect::<Vec<_>>())
            .field("signed", &self.inner.secret.is_some())
            .finish()
    }
}

impl Handler for HttpHandler {
    fn call(&self, job: JobContext) -> BoxFuture<Result<(), JobError>> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(job).await })
    }
}

impl Inner {
    async fn run(&self, job: JobContext) -> Result<(), JobError> {
        let body = Bytes::from(document(&job)?);
        let left = (job.deadline() - chrono::Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        let until = tokio::time::Instant::now() + left;
        // Leaving this select drops the exchange, and with it the request and its connection.
        tokio::select! {
            biased;
            () = job.cancelled() => Err(JobError::retry(format!(
                "POST {}: cancelled; the request was dropped and its connection closed",
                self.shown
            ))),
            r = tokio::time::timeout_at(until, self.exchange(&job, body)) => match r {
                Ok(outcome) => outcome,
                Err(_) => Err(JobError::retry(format!(
                    "POST {}: no answer by the job's deadline ({} after the start)",
                    self.shown,
                    humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
                ))),
            },
        }
    }

    async fn exchange(&self, job: &JobContext, body: Bytes) -> Result<(), JobError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| JobError::retry("the handler is shutting down"))?;
        let request = self.request(job, body)?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| JobError::retry(format!("POST {}: {}", self.shown, chain(&e))))?;
        let (parts, mut incoming) = response.into_parts();
        let mut head = Vec::new();
        let mut broke_off = None;
        while head.len() < BODY_LIMIT {
            match incoming.frame().await {
                None => break,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        head.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => {
                    broke_off = Some(chain(&e));
                    break;
                }
            }
        }
        let header = |name| {
            parts
                .headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        let reason = parts
            .extensions
            .get::<hyper::ext::ReasonPhrase>()
            .and_then(|r| std::str::from_utf8(r.as_bytes()).ok());
        let answer = Answer {
            status: parts.status,
            reason,
            retry_after: header(RETRY_AFTER),
            location: header(LOCATION),
            body: &head,
        };
        if let Some(e) = broke_off.filter(|_| parts.status.is_success()) {
            // The body may have said the application finished the job: unknown, so not done.
            return Err(JobError::retry(format!(
                "POST {}: HTTP {} but the body broke off: {e}",
                self.shown,
                parts.status.as_u16()
            )));
        }
        let verdict = answer::judge(&answer, &self.retry_statuses, chrono::Utc::now());
        if matches!(verdict, Verdict::Done | Verdict::FinishedByApplication) {
            if let Some(output) = answer::output(&head) {
                job.output(&output).await?;
            } else if head.len() >= BODY_LIMIT {
                warn!(job_id = %job.id, kind = %job.kind, "the answer's body is over {} KiB and was not read in full: an output in it is not recorded", BODY_LIMIT / 1024);
            }
        }
        match verdict {
            Verdict::Done => {
                if !head.is_empty() {
                    debug!(job_id = %job.id, kind = %job.kind, status = parts.status.as_u16(),
                        body = %answer::excerpt(&head), "answer body ignored");
                }
                Ok(())
            }
            Verdict::FinishedByApplication => {
                job.finished_by_application();
                Ok(())
            }
            Verdict::Snooze(d) => Err(JobError::snooze(d)),
            Verdict::Retry(m) => Err(JobError::retry(format!("POST {}: {m}", self.shown))),
            Verdict::Fatal(m) => Err(JobError::fatal(format!("POST {}: {m}", self.shown))),
        }
    }

    fn request(&self, job: &JobContext, body: Bytes) -> Result<Request<Full<Bytes>>, JobError> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header("Jobq-Job-Id", job.id.0)
            .header("Jobq-Kind", &job.kind)
            .header("Jobq-Queue", &job.queue)
            .header("Jobq-Attempt", job.attempt)
            .header("Jobq-Max-Attempts", job.max_attempts)
            .header("Jobq-Claim", &job.claim)
            .header("Jobq-Deadline", rfc3339(job.deadline()));
        // W3C trace context's own header name, which HTTP servers' OpenTelemetry instrumentation reads.
        if let Some(t) = job.traceparent() {
            builder = builder.header("traceparent", t.to_string());
        }
        if let Some(secret) = &self.secret {
            let now = chrono::Utc::now().timestamp();
            builder = builder.header(sign::HEADER, sign::signature(secret, now, &body));
        }
        let mut request = builder
            .body(Full::new(body))
            .map_err(|e| JobError::fatal(format!("POST {}: {e}", self.shown)))?;
        for (name, value) in &self.headers {
            request.headers_mut().insert(name, value.clone());
        }
        Ok(request)
    }
}

/// The request's body: the job as one JSON document, its payload as JSON (not a string), byte for byte.
fn document(job: &JobContext) -> Result<Vec<u8>, JobError> {
    #[derive(serde::Serialize)]
    struct Document<'a> {
        id: u64,
        kind: &'a str,
        queue: &'a str,
        attempt: u16,
        max_attempts: u16,
        claim: &'a str,
        payload: &'a serde_json::value::RawValue,
        run_at: String,
        deadline: String,
    }
    let payload: &serde_json::value::RawValue = serde_json::from_str(job.payload_str().trim())
        .map_err(|e| JobError::fatal(format!("payload is not JSON: {e}")))?;
    serde_json::to_vec(&Document {
        id: job.id.0,
        kind: &job.kind,
        queue: &job.queue,
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        claim: &job.claim,
        payload,
        run_at: rfc3339(job.run_at()),
        deadline: rfc3339(job.deadline()),
    })
    .map_err(|e| JobError::fatal(format!("request document: {e}")))
}

/// RFC 3339 in UTC to the millisecond: `2026-01-01T12:00:00.000Z`.
fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// An error and its sources, `: `-separated: hyper's own message alone says only "client error
/// (Connect)", its sources say "Connection refused".
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_carries_the_payload_as_json() {
        let job = JobContext::for_test("resize", r#" {"image": 7, "b": [1,2]} "#);
        let doc: serde_json::Value = serde_json::from_slice(&document(&job).unwrap()).unwrap();
        assert_eq!(doc["payload"], serde_json::json!({"image": 7, "b": [1, 2]}));
        assert_eq!(doc["kind"], "resize");
        assert_eq!(doc["attempt"], 1);
        assert!(doc["deadline"].as_str().unwrap().ends_with('Z'));
        let bad = JobContext::for_test("resize", "not json");
        assert!(document(&bad).unwrap_err().is_fatal());
    }
}
