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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};
use hyper::{Method, Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;
use tracing::debug;

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

/// How much of an answer's body is read: enough for `{"finished": true}` and an error's excerpt. The
/// rest is not read, and the connection is closed instead of reused.
const BODY_LIMIT: usize = 64 * 1024;

/// Headers jobq sets itself, which `headers` may not replace.
const OWN_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
];

/// An HTTP handler as configured: `[handlers.KIND] url = …` and its keys, checked but not yet loaded
/// (the files are read by [`HttpSpec::build`]).
#[derive(Clone, PartialEq, Eq)]
pub struct HttpSpec {
    /// The endpoint: `http://` or `https://`, without user info.
    pub url: String,
    /// Headers sent with every request (an `Authorization`, say).
    pub headers: BTreeMap<String, String>,
    /// A file whose content (less trailing white space) is the signing secret.
    pub secret_file: Option<PathBuf>,
    /// A PEM file of the CAs to trust instead of the public ones (a private CA).
    pub ca_file: Option<PathBuf>,
    /// Requests in flight at most ([`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// 4xx statuses that fail the attempt (retried) instead of killing the job.
    pub retry_statuses: Vec<u16>,
}

impl std::fmt::Debug for HttpSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header names only: their values are credentials (an Authorization).
        f.debug_struct("HttpSpec")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("secret_file", &self.secret_file)
            .field("ca_file", &self.ca_file)
            .field("max_connections", &self.max_connections)
            .field("retry_statuses", &self.retry_statuses)
            .finish()
    }
}

impl HttpSpec {
    /// A handler POSTing to `url`, with the defaults for everything else.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: BTreeMap::new(),
            secret_file: None,
            ca_file: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            retry_statuses: Vec::new(),
        }
    }

    /// Checks what can be checked without reading files; the message names the key.
    ///
    /// # Errors
    /// A URL that is not `http(s)://host…` or has user info, a header jobq sets itself or one that is
    /// not a valid header, `max_connections` of 0, a retry status outside 400–499.
    pub fn check(&self) -> std::result::Result<(), String> {
        self.uri()?;
        self.header_map()?;
        if self.max_connections == 0 {
            return Err("max_connections must be at least 1".into());
        }
        if let Some(s) = self
            .retry_statuses
            .iter()
            .find(|s| !(400..=499).contains(*s))
        {
            return Err(format!(
                "retry_statuses: {s} is not a 4xx status (5xx, 408 and 429 are retried or snoozed anyway)"
            ));
        }
        Ok(())
    }

    /// Reads the secret and CA files and builds the handler: what a worker does when it starts, so a
    /// missing file is one clear error then.
    ///
    /// # Errors
    /// What [`HttpSpec::check`] refuses; a secret file that cannot be read or is empty; a CA file that
    /// cannot be read or holds no certificate. The message names the key and the path.
    pub fn build(&self) -> std::result::Result<HttpHandler, String> {
        self.check()?;
        let url = self.uri()?;
        let secret = self.secret_file.as_deref().map(read_secret).transpose()?;
        let tls = tls_config(self.ca_file.as_deref())?;
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(self.max_connections)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
        Ok(HttpHandler {
            inner: Arc::new(Inner {
                shown: shown(&url),
                url,
                headers: self.header_map()?,
                secret,
                client,
                slots: Arc::new(Semaphore::new(self.max_connections)),
                retry_statuses: self.retry_statuses.clone(),
            }),
        })
    }

    fn uri(&self) -> std::result::Result<Uri, String> {
        let parsed = url::Url::parse(&self.url).map_err(|e| format!("url {:?}: {e}", self.url))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "url {:?}: the scheme must be http or https, not {}",
                self.url,
                parsed.scheme()
            ));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(
                "url: user info (user:password@) is not allowed in the URL; send credentials with \
                 `headers = { Authorization = \"…\" }`"
                    .into(),
            );
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(format!("url {:?}: no host", self.url));
        }
        if parsed.fragment().is_some() {
            return Err(format!(
                "url {:?}: a #fragment is never sent; leave it out",
                self.url
            ));
        }
        parsed
            .as_str()
            .parse::<Uri>()
            .map_err(|e| format!("url {:?}: {e}", self.url))
    }

    fn header_map(&self) -> std::result::Result<HeaderMap, String> {
        let mut map = HeaderMap::new();
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if lower.starts_with("jobq-") || OWN_HEADERS.contains(&lower.as_str()) {
                return Err(format!("headers: {name} is set by jobq itself"));
            }
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("headers: {name:?} is not a valid header name"))?;
            let v = HeaderValue::from_str(value)
                .map_err(|_| format!("headers: the value of {name} is not a valid header value"))?;
            map.insert(n, v);
        }
        Ok(map)
    }
}

/// The signing secret: the file's content less trailing white space (the newline an editor or `echo`
/// leaves is not part of the key).
fn read_secret(path: &Path) -> std::result::Result<Vec<u8>, String> {
    let mut bytes = std::fs::read(path).map_err(|e| {
        format!(
            "secret_file {:?} cannot be read: {e}",
            path.display().to_string()
        )
    })?;
    while bytes.last().is_some_and(u8::is_ascii_whitespace) {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(format!(
            "secret_file {:?} is empty; put the signing secret in it",
            path.display().to_string()
        ));
    }
    Ok(bytes)
}

/// rustls on ring (the provider the database connections use), trusting `ca_file`'s certificates only
/// when one is given (a private CA), else the public web's (Mozilla's list, compiled in).
fn tls_config(ca_file: Option<&Path>) -> std::result::Result<rustls::ClientConfig, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let shown = path.display().to_string();
            let pem = std::fs::read(path)
                .map_err(|e| format!("ca_file {shown:?} cannot be read: {e}"))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("ca_file {shown:?}: not PEM certificates: {e}"))?;
            if certs.is_empty() {
                return Err(format!(
                    "ca_file {shown:?} holds no certificate (-----BEGIN CERTIFICATE-----)"
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("ca_file {shown:?}: {e}"))?;
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The URL as error messages show it: without its query, which may carry a token.
fn shown(url: &Uri) -> String {
    format!(
        "{}://{}{}",
        url.scheme_str().unwrap_or("http"),
        url.authority().map_or("", |a| a.as_str()),
        url.path()
    )
}

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
        match answer::judge(&answer, &self.retry_statuses, chrono::Utc::now()) {
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
    fn urls_are_checked() {
        let err = |url: &str| HttpSpec::new(url).check().unwrap_err();
        assert!(
            HttpSpec::new("https://app.internal/jobs/resize")
                .check()
                .is_ok()
        );
        assert!(
            HttpSpec::new("http://127.0.0.1:8080/x?token=1")
                .check()
                .is_ok()
        );
        assert!(err("ftp://files/x").contains("must be http or https, not ftp"));
        assert!(err("https://user:pw@app/x").contains("user info"));
        assert!(err("https://user@app/x").contains("user info"));
        assert!(err("app.internal/jobs").contains("url"));
        assert!(err("https://app/x#frag").contains("fragment"));
    }

    #[test]
    fn headers_statuses_and_connections_are_checked() {
        let mut s = HttpSpec::new("https://app/x");
        s.headers.insert("Jobq-Claim".into(), "x".into());
        assert!(s.check().unwrap_err().contains("Jobq-Claim is set by jobq"));
        s.headers = [("Bad Name".to_string(), "x".to_string())].into();
        assert!(s.check().unwrap_err().contains("not a valid header name"));
        s.headers = [("Authorization".to_string(), "Bearer t".to_string())].into();
        assert!(s.check().is_ok());
        s.retry_statuses = vec![409, 500];
        assert!(s.check().unwrap_err().contains("500 is not a 4xx"));
        s.retry_statuses = vec![409];
        s.max_connections = 0;
        assert!(s.check().unwrap_err().contains("max_connections"));
    }

    #[test]
    fn files_are_read_at_build() {
        let dir = std::env::temp_dir().join(format!("jobq-http-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = HttpSpec::new("https://app/x");
        s.secret_file = Some(dir.join("missing.key"));
        let e = s.build().unwrap_err();
        assert!(
            e.contains("secret_file") && e.contains("missing.key"),
            "{e}"
        );
        std::fs::write(dir.join("empty.key"), "\n").unwrap();
        s.secret_file = Some(dir.join("empty.key"));
        assert!(s.build().unwrap_err().contains("is empty"));
        std::fs::write(dir.join("k.key"), "s3cret\n").unwrap();
        s.secret_file = Some(dir.join("k.key"));
        assert!(s.build().is_ok());
        std::fs::write(dir.join("ca.pem"), "not a certificate").unwrap();
        s.ca_file = Some(dir.join("ca.pem"));
        assert!(s.build().unwrap_err().contains("holds no certificate"));
        std::fs::remove_dir_all(&dir).ok();
    }

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
