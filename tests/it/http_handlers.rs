//! HTTP handlers against a real HTTP server started here, run by the real worker: every class of
//! answer, the signature, keep-alive under a connection cap, requests dropped (and their connections
//! closed) on cancel, timeout and SIGKILL, and the config errors. The SIGKILL test checks the requests
//! its application took as a history (`history::check`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use jobq::config::Config;
use jobq::handler::http::sign;
use jobq::{CancellationToken, JobRecord, Mode, NewJob, RetryPolicy, State, Worker, WorkerConfig};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{
    TestDb, jobq, run_jobq, scratch_dir, spawn_forever_worker, wait_output, wait_until,
    write_config,
};
use crate::history::{self, History, LibraryCopies};

// ---------------------------------------------------------------------------------------------------
// A test application: a hyper server on 127.0.0.1:0 that records requests and answers with a closure
// ---------------------------------------------------------------------------------------------------

/// A request as the application received it.
#[derive(Debug, Clone)]
struct Received {
    headers: hyper::HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }

    fn document(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the body is one JSON document")
    }
}

/// What the application answers.
#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

fn reply(status: u16) -> Reply {
    Reply {
        status,
        headers: Vec::new(),
        body: String::new(),
    }
}

impl Reply {
    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    fn body(mut self, body: &str) -> Self {
        self.body = body.to_string();
        self
    }
}

type Answer = Arc<dyn Fn(Received) -> Pin<Box<dyn Future<Output = Reply> + Send>> + Send + Sync>;

struct App {
    addr: SocketAddr,
    /// TCP connections accepted.
    accepted: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
    /// Requests being answered now, and the most there ever were at once.
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

impl App {
    async fn start<F, Fut>(answer: F) -> App
    where
        F: Fn(Received) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Reply> + Send + 'static,
    {
        let answer: Answer = Arc::new(move |r| Box::pin(answer(r)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let app = App {
            addr: listener.local_addr().unwrap(),
            accepted: Arc::default(),
            received: Arc::default(),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
        };
        let (accepted, received) = (app.accepted.clone(), app.received.clone());
        let (in_flight, max_in_flight) = (app.in_flight.clone(), app.max_in_flight.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                let (answer, received) = (answer.clone(), received.clone());
                let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
                let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let (answer, received) = (answer.clone(), received.clone());
                    let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
                    async move {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        max_in_flight.fetch_max(now, Ordering::SeqCst);
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let r = Received {
                            headers: parts.headers,
                            body,
                        };
                        received.lock().unwrap().push(r.clone());
                        let out = answer(r).await;
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        let mut resp = hyper::Response::builder().status(out.status);
                        for (n, v) in &out.headers {
                            resp = resp.header(*n, v);
                        }
                        Ok::<_, std::convert::Infallible>(
                            resp.body(Full::new(Bytes::from(out.body))).unwrap(),
                        )
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        app
    }

    /// An application that always answers `r`.
    async fn answering(r: Reply) -> App {
        App::start(move |_| {
            let r = r.clone();
            async move { r }
        })
        .await
    }

    fn url(&self) -> String {
        format!("http://{}/jobs", self.addr)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// An application that reads each request and then never answers, noting when the client closes the
/// connection; with `answer_later`, every request after the first is answered 200 at once. Raw TCP,
/// so that the close is seen by the test itself, not inferred from a framework.
///
/// Each request is a copy of its job's attempt in `copies` (named by its `jobq-*` headers): one
/// answered ran to its end, one whose client went away is gone when the application sees the close,
/// since it stops serving the request then.
struct Hanging {
    addr: SocketAddr,
    arrived: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    copies: LibraryCopies,
}

impl Hanging {
    async fn start(answer_later: bool) -> Hanging {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let h = Hanging {
            addr: listener.local_addr().unwrap(),
            arrived: Arc::default(),
            closed: Arc::default(),
            copies: LibraryCopies::new(),
        };
        let (arrived, closed, copies) = (h.arrived.clone(), h.closed.clone(), h.copies.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (arrived, closed, copies) = (arrived.clone(), closed.clone(), copies.clone());
                tokio::spawn(async move {
                    loop {
                        let Some(headers) = read_request(&mut stream).await else {
                            return;
                        };
                        let header = |name: &str| {
                            headers
                                .iter()
                                .find(|(n, _)| n == name)
                                .map_or("", |(_, v)| v.as_str())
                        };
                        let copy = copies.start_attempt(
                            header("jobq-job-id").parse().unwrap(),
                            header("jobq-attempt").parse().unwrap(),
                            header("jobq-claim"),
                        );
                        let n = arrived.fetch_add(1, Ordering::SeqCst);
                        if answer_later && n > 0 {
                            copy.ended();
                            let _ = stream
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                                .await;
                            continue;
                        }
                        // Hang: wait for the client to go away.
                        let mut buf = [0u8; 1024];
                        loop {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(_) => {}
                            }
                        }
                        drop(copy);
                        closed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                });
            }
        });
        h
    }

    fn url(&self) -> String {
        format!("http://{}/jobs", self.addr)
    }
}

/// Reads one HTTP/1.1 request (headers and a Content-Length body) and returns its headers, names in
/// lower case; None at end of stream.
async fn read_request(stream: &mut TcpStream) -> Option<Vec<(String, String)>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let headers: Vec<(String, String)> = String::from_utf8_lossy(&buf[..head_end])
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(headers)
}

// ---------------------------------------------------------------------------------------------------
// Running jobs
// ---------------------------------------------------------------------------------------------------

/// `[handlers.KIND]` for `url`, with `extra` lines.
fn handler(kind: &str, url: &str, extra: &str) -> String {
    format!("[handlers.{kind:?}]\nurl = {url:?}\n{extra}\n")
}

/// The handlers of `config_text`, built as a worker builds them.
fn handlers_of(db: &TestDb, config_text: &str) -> jobq::Handlers {
    let dir = scratch_dir();
    let path = write_config(&dir, config_text);
    let config = Config::load(&path).expect("config loads");
    let handlers = config.handlers(&db.pool).expect("handlers");
    std::fs::remove_dir_all(&dir).ok();
    handlers
}

/// Runs a draining worker in this process with the handlers of `config_text`. Failed jobs come back
/// after at least an hour, so a drain runs each job once.
async fn drain(db: &TestDb, config_text: &str) -> jobq::WorkerReport {
    let cfg = WorkerConfig {
        mode: Mode::Drain,
        retry: RetryPolicy {
            base: Duration::from_secs(3600),
            cap: Duration::from_secs(7200),
        },
        ..Default::default()
    };
    let worker = Worker::new(db.pool.clone(), handlers_of(db, config_text), cfg).expect("worker");
    tokio::time::timeout(
        Duration::from_secs(30),
        worker.run(CancellationToken::new()),
    )
    .await
    .expect("the worker drains within 30 s")
    .expect("worker runs")
}

async fn enqueue(db: &TestDb, kind: &str, payload: serde_json::Value) -> jobq::JobId {
    jobq::enqueue(&db.pool, &NewJob::new(kind).payload(&payload).unwrap())
        .await
        .unwrap()
}

async fn job(db: &TestDb, id: jobq::JobId) -> JobRecord {
    jobq::testing::get_job(&db.pool, id).await.unwrap()
}

fn last_error(j: &JobRecord) -> &str {
    j.last_error.as_deref().unwrap_or("")
}

/// Runs one job of a handler for `url` (with `extra` settings) through a draining worker.
async fn run_one(db: &TestDb, url: &str, extra: &str) -> JobRecord {
    let id = enqueue(db, "h", serde_json::json!({"n": 1})).await;
    drain(db, &handler("h", url, extra)).await;
    job(db, id).await
}

/// Seconds from the database's now to the job's run_at.
async fn due_in_secs(db: &TestDb, id: jobq::JobId) -> i64 {
    db.scalar(&format!(
        "SELECT TIMESTAMPDIFF(SECOND, NOW(6), run_at) FROM job_queue WHERE id = {id}"
    ))
    .await
}

// ---------------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------------

/// A job's trace context goes in W3C's own header, which the application's instrumentation reads.
#[tokio::test]
async fn the_request_carries_the_jobs_traceparent() {
    let db = TestDb::new().await;
    let app = App::answering(reply(200)).await;
    let parent = crate::traces::PARENT;
    jobq::enqueue(&db.pool, &NewJob::new("h").traceparent(parent).unwrap())
        .await
        .unwrap();
    assert_eq!(drain(&db, &handler("h", &app.url(), "")).await.done, 1);
    assert_eq!(app.received()[0].header("traceparent"), parent);
}

#[tokio::test]
async fn http_200_is_done_and_the_request_carries_the_job() {
    let db = TestDb::new().await;
    let app = App::answering(reply(200).body("thanks")).await;
    let id = enqueue(
        &db,
        "img.resize",
        serde_json::json!({"image": 7, "sizes": [1, 2]}),
    )
    .await;
    let config = handler(
        "img.resize",
        &app.url(),
        "headers = { Authorization = \"Bearer t0k\" }\ntimeout = \"90s\"",
    );
    let report = drain(&db, &config).await;
    assert_eq!(report.done, 1, "{report:?}");
    let j = job(&db, id).await;
    assert_eq!(j.state, State::Done);

    let got = app.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.header("authorization"), "Bearer t0k");
    assert_eq!(r.header("jobq-job-id"), id.to_string());
    assert_eq!(r.header("jobq-kind"), "img.resize");
    assert_eq!(r.header("jobq-queue"), "default");
    assert_eq!(r.header("jobq-attempt"), "1");
    assert_eq!(r.header("jobq-max-attempts"), "20");
    assert!(!r.header("jobq-claim").is_empty());
    assert!(
        r.header("jobq-signature").is_empty(),
        "no secret, no signature"
    );
    assert!(
        r.header("traceparent").is_empty(),
        "no trace context, no header"
    );
    let doc = r.document();
    assert_eq!(doc["id"], id.0);
    assert_eq!(doc["kind"], "img.resize");
    assert_eq!(doc["queue"], "default");
    assert_eq!(doc["attempt"], 1);
    assert_eq!(doc["max_attempts"], 20);
    assert_eq!(doc["claim"], r.header("jobq-claim"));
    assert_eq!(
        doc["payload"],
        serde_json::json!({"image": 7, "sizes": [1, 2]})
    );
    assert_eq!(doc["deadline"], r.header("jobq-deadline"));
    let deadline = chrono::DateTime::parse_from_rfc3339(doc["deadline"].as_str().unwrap()).unwrap();
    let run_at = chrono::DateTime::parse_from_rfc3339(doc["run_at"].as_str().unwrap()).unwrap();
    let ahead = deadline.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::seconds(60) && ahead <= chrono::Duration::seconds(90),
        "the deadline is the start plus the handler's timeout: {ahead}"
    );
    assert!(run_at <= chrono::Utc::now());
}

#[tokio::test]
async fn http_finished_true_leaves_the_finish_to_the_application_and_the_worker_checks_it() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    // The honest application finishes the job in its own transaction; the lying one only says so.
    let app = App::start(move |r: Received| {
        let pool = pool.clone();
        async move {
            let doc = r.document();
            if doc["payload"]["honest"] == true {
                let (finished,): (i64,) = sqlx::query_as("CALL jobq_finish(?, ?, ?)")
                    .bind(doc["id"].as_u64().unwrap())
                    .bind(doc["claim"].as_str().unwrap())
                    .bind(doc["attempt"].as_u64().unwrap())
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                assert_eq!(finished, 1);
            }
            reply(200)
                .header("content-type", "application/json")
                .body(r#"{"finished": true}"#)
        }
    })
    .await;
    let honest = enqueue(&db, "h", serde_json::json!({"honest": true})).await;
    let liar = enqueue(&db, "h", serde_json::json!({"honest": false})).await;
    drain(&db, &handler("h", &app.url(), "")).await;

    let j = job(&db, honest).await;
    assert_eq!((j.state, j.attempts), (State::Done, 1));
    let j = job(&db, liar).await;
    assert_eq!((j.state, j.attempts), (State::Retry, 1), "{j:?}");
    assert!(
        last_error(&j).contains("jobq_finish"),
        "the attempt fails saying the application did not finish it: {}",
        last_error(&j)
    );
}

/// An application reports progress with `jobq_progress` while it works and answers with an output:
/// both stay on the job; an output over 64 KiB makes the job dead, saying why.
#[tokio::test]
async fn the_application_reports_progress_and_answers_with_an_output() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let app = App::start(move |r: Received| {
        let pool = pool.clone();
        async move {
            let doc = r.document();
            let (reported,): (i64,) =
                sqlx::query_as("CALL jobq_progress(?, ?, ?, 80, 'sent 4 of 5')")
                    .bind(doc["id"].as_u64().unwrap())
                    .bind(doc["claim"].as_str().unwrap())
                    .bind(doc["attempt"].as_u64().unwrap())
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            assert_eq!(reported, 1);
            let body = if doc["payload"]["big"] == true {
                format!(r#"{{"output": "{}"}}"#, "x".repeat(70_000))
            } else {
                r#"{"output": {"sent": 5}}"#.to_string()
            };
            reply(200)
                .header("content-type", "application/json")
                .body(&body)
        }
    })
    .await;
    let small = enqueue(&db, "h", serde_json::json!({"big": false})).await;
    let big = enqueue(&db, "h", serde_json::json!({"big": true})).await;
    drain(&db, &handler("h", &app.url(), "")).await;

    let j = job(&db, small).await;
    assert_eq!(j.state, State::Done, "{}", last_error(&j));
    let p = j.progress.unwrap();
    assert_eq!(
        (p.percent, p.message.as_deref()),
        (80.0, Some("sent 4 of 5"))
    );
    let jobs = jobq::Jobs::new(db.pool.clone());
    assert_eq!(
        jobs.output(small).await.unwrap().as_deref(),
        Some(r#"{"sent":5}"#)
    );
    let j = job(&db, big).await;
    assert_eq!(j.state, State::Dead);
    assert!(last_error(&j).contains("64 KiB"), "{}", last_error(&j));
    assert_eq!(jobs.output(big).await.unwrap(), None);
}

#[tokio::test]
async fn http_429_and_503_with_retry_after_snooze_without_using_an_attempt() {
    let db = TestDb::new().await;
    let seconds = App::answering(reply(429).header("retry-after", "120")).await;
    let j = run_one(&db, &seconds.url(), "").await;
    assert_eq!((j.state, j.attempts), (State::Queued, 0), "{j:?}");
    let due = due_in_secs(&db, j.id).await;
    assert!(
        (100..=120).contains(&due),
        "run_at moved by Retry-After: {due}s"
    );

    let date = (chrono::Utc::now() + chrono::Duration::seconds(600))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let dated = App::answering(reply(503).header("retry-after", &date)).await;
    let j = run_one(&db, &dated.url(), "").await;
    assert_eq!((j.state, j.attempts), (State::Queued, 0), "{j:?}");
    let due = due_in_secs(&db, j.id).await;
    assert!(
        (580..=600).contains(&due),
        "run_at moved to the date: {due}s"
    );

    let bare = App::answering(reply(429)).await;
    let j = run_one(&db, &bare.url(), "").await;
    assert_eq!((j.state, j.attempts), (State::Queued, 0), "{j:?}");
    let due = due_in_secs(&db, j.id).await;
    let default = jobq::handler::http::DEFAULT_429_SNOOZE.as_secs() as i64;
    assert!(
        (default - 10..=default).contains(&due),
        "429 without Retry-After: {due}s"
    );
}

#[tokio::test]
async fn http_503_without_retry_after_and_500_fail_the_attempt_naming_status_and_body() {
    let db = TestDb::new().await;
    let app = App::answering(reply(503)).await;
    let j = run_one(&db, &app.url(), "").await;
    assert_eq!((j.state, j.attempts), (State::Retry, 1), "{j:?}");
    assert!(last_error(&j).contains("HTTP 503"), "{}", last_error(&j));

    let long = format!("  boom: the database is down {}", "x".repeat(500));
    let app = App::answering(reply(500).body(&long)).await;
    let j = run_one(&db, &app.url(), "").await;
    assert_eq!((j.state, j.attempts), (State::Retry, 1), "{j:?}");
    let e = last_error(&j);
    assert!(
        e.contains("HTTP 500 Internal Server Error: boom: the database is down xxx"),
        "{e}"
    );
    assert!(
        e.len() < 320,
        "only the start of the body: {} bytes",
        e.len()
    );
}

#[tokio::test]
async fn http_404_is_dead_at_once_unless_listed_in_retry_statuses() {
    let db = TestDb::new().await;
    let app = App::answering(reply(404).body("no such image")).await;
    let j = run_one(&db, &app.url(), "").await;
    assert_eq!((j.state, j.attempts), (State::Dead, 1), "{j:?}");
    assert!(
        last_error(&j).contains("HTTP 404 Not Found") && last_error(&j).contains("no such image"),
        "{}",
        last_error(&j)
    );

    let j = run_one(&db, &app.url(), "retry_statuses = [404, 409]").await;
    assert_eq!((j.state, j.attempts), (State::Retry, 1), "{j:?}");
    assert!(last_error(&j).contains("HTTP 404"), "{}", last_error(&j));
}

#[tokio::test]
async fn http_redirects_are_not_followed() {
    let db = TestDb::new().await;
    let app = App::answering(reply(302).header("location", "/elsewhere")).await;
    let j = run_one(&db, &app.url(), "").await;
    assert_eq!((j.state, j.attempts), (State::Retry, 1), "{j:?}");
    let e = last_error(&j);
    assert!(
        e.contains("HTTP 302 Found") && e.contains("Location: /elsewhere"),
        "{e}"
    );
    assert_eq!(
        app.received().len(),
        1,
        "one request: the redirect was not followed"
    );
}

#[tokio::test]
async fn http_timeout_fails_the_attempt_and_closes_the_connection() {
    let db = TestDb::new().await;
    let app = Hanging::start(false).await;
    let id = enqueue(&db, "h", serde_json::json!({})).await;
    // One attempt, so the job stays dead after it instead of hanging again.
    let config = handler("h", &app.url(), "timeout = \"1s\"\nmax_attempts = 1");
    let worker = db.worker(handlers_of(&db, &config)).start().await;
    // The worker still runs (its handler and its pool are alive): the close is the dropped request's.
    wait_until("the connection closed", Duration::from_secs(10), || async {
        app.closed.load(Ordering::SeqCst) == 1
    })
    .await;
    wait_until("the job dead", Duration::from_secs(10), || async {
        db.states().await == "dead=1"
    })
    .await;
    worker.stop().await;
    let j = job(&db, id).await;
    assert_eq!(j.attempts, 1);
    assert!(!last_error(&j).is_empty());
    eprintln!("timeout: {}", last_error(&j));
}

#[tokio::test]
async fn http_connection_refused_fails_the_attempt() {
    let db = TestDb::new().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let j = run_one(&db, &format!("http://127.0.0.1:{port}/jobs"), "").await;
    assert_eq!((j.state, j.attempts), (State::Retry, 1), "{j:?}");
    let e = last_error(&j).to_ascii_lowercase();
    assert!(
        e.contains("refused") && e.contains(&format!("127.0.0.1:{port}")),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------------
// Signing
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn http_requests_are_signed_and_a_wrong_secret_is_caught() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    std::fs::write(dir.join("right.key"), "whsec_right\n").unwrap();
    std::fs::write(dir.join("wrong.key"), "whsec_wrong").unwrap();
    // The application knows the right secret and refuses what it does not verify.
    let app = App::start(|r: Received| async move {
        let now = chrono::Utc::now().timestamp();
        let header = r.header(sign::HEADER).to_string();
        if sign::verify(
            b"whsec_right",
            &header,
            &r.body,
            now,
            sign::DEFAULT_TOLERANCE_SECS,
        ) {
            reply(200)
        } else {
            reply(401).body("bad signature")
        }
    })
    .await;
    let config = format!(
        "{}{}",
        handler(
            "signed",
            &app.url(),
            &format!("secret_file = {:?}", dir.join("right.key"))
        ),
        handler(
            "forged",
            &app.url(),
            &format!("secret_file = {:?}", dir.join("wrong.key"))
        ),
    );
    let good = enqueue(&db, "signed", serde_json::json!({})).await;
    let bad = enqueue(&db, "forged", serde_json::json!({})).await;
    drain(&db, &config).await;
    assert_eq!(job(&db, good).await.state, State::Done);
    let j = job(&db, bad).await;
    assert_eq!(j.state, State::Dead, "{j:?}");
    assert!(last_error(&j).contains("401") && last_error(&j).contains("bad signature"));
    let header = app.received()[0].header(sign::HEADER).to_string();
    assert!(
        header.starts_with("t=") && header.contains(",v1="),
        "{header}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn http_keep_alive_reuses_connections_within_max_connections() {
    let db = TestDb::new().await;
    let app = App::start(|_| async {
        // Long enough that the worker's jobs overlap and contend for the two connections.
        tokio::time::sleep(Duration::from_millis(30)).await;
        reply(200)
    })
    .await;
    for n in 0..20 {
        enqueue(&db, "h", serde_json::json!({ "n": n })).await;
    }
    let report = drain(&db, &handler("h", &app.url(), "max_connections = 2")).await;
    assert_eq!(report.done, 20, "{report:?}");
    assert_eq!(app.received().len(), 20);
    let accepted = app.accepted.load(Ordering::SeqCst);
    let most = app.max_in_flight.load(Ordering::SeqCst);
    eprintln!("20 jobs: {accepted} connections, at most {most} requests at once");
    // Two requests at most at once; a connection just answered goes back to the pool a moment after
    // its slot is free, so a third can open in between, rarely.
    assert!(accepted <= 4, "20 jobs over {accepted} connections");
    assert!(most <= 2, "{most} requests at once");
}

#[tokio::test]
async fn http_an_operator_cancel_drops_the_request_and_closes_its_connection() {
    let db = TestDb::new().await;
    let app = Hanging::start(false).await;
    let id = enqueue(&db, "h", serde_json::json!({})).await;
    let worker = db
        .worker(handlers_of(&db, &handler("h", &app.url(), "")))
        .start()
        .await;
    wait_until("the request arrived", Duration::from_secs(10), || async {
        app.arrived.load(Ordering::SeqCst) == 1
    })
    .await;
    jobq::Jobs::new(db.pool.clone()).cancel(id).await.unwrap();
    wait_until("the connection closed", Duration::from_secs(10), || async {
        app.closed.load(Ordering::SeqCst) == 1
    })
    .await;
    wait_until("the job cancelled", Duration::from_secs(10), || async {
        db.states().await == "cancelled=1"
    })
    .await;
    worker.stop().await;
}

/// SIGKILL to the worker: its request's connection is closed, the reaper hands the job on and the
/// next worker runs it. The requests the application took are the job's copies, checked with the row
/// and `jobq_attempts` as one history: the second began only once the first was gone.
#[tokio::test]
async fn http_a_sigkilled_worker_s_request_is_closed_and_the_job_runs_again() {
    let db = TestDb::new().await;
    // The first request hangs; the next one is answered at once.
    let app = Hanging::start(true).await;
    let dir = scratch_dir();
    let cfg = write_config(&dir, &handler("h", &app.url(), ""));
    let id = enqueue(&db, "h", serde_json::json!({})).await;
    let worker = spawn_forever_worker(&db, &cfg);
    wait_until("the request arrived", Duration::from_secs(15), || async {
        app.arrived.load(Ordering::SeqCst) == 1
    })
    .await;
    let killed_claimant = history::sole_worker_token(&db.pool).await;
    kill(Pid::from_raw(worker.id() as i32), Signal::SIGKILL).unwrap();
    let _ = tokio::task::spawn_blocking(move || wait_output(worker.take(), Duration::from_secs(5)))
        .await;
    wait_until("the connection closed", Duration::from_secs(5), || async {
        app.closed.load(Ordering::SeqCst) == 1
    })
    .await;

    let stop = CancellationToken::new();
    let reaper = jobq::Reaper::new(db.pool.clone(), jobq::ReaperConfig::default()).unwrap();
    let reaper_task = tokio::spawn(reaper.run(stop.clone()));
    wait_until(
        "the job runnable again",
        Duration::from_secs(15),
        || async { db.states().await == "queued=1" },
    )
    .await;
    stop.cancel();
    reaper_task.await.unwrap().unwrap();

    let child = jobq(
        Some(&db.url),
        &["worker", "--config", cfg.to_str().unwrap()],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // Waited for off the runtime's thread: the application answering it runs on that thread.
    let out = tokio::task::spawn_blocking(move || wait_output(child, Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = job(&db, id).await;
    assert_eq!((j.state, j.attempts), (State::Done, 2), "{j:?}");
    assert_eq!(app.arrived.load(Ordering::SeqCst), 2);
    let mut h = History::default();
    h.read_library_copies(&app.copies);
    h.read_database(&db.pool).await;
    h.read_worker_log(&String::from_utf8_lossy(&out.stderr));
    history::assert_ran_again_once(&h, &killed_claimant, id.0);
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------------
// Config errors
// ---------------------------------------------------------------------------------------------------

#[tokio::test]
async fn http_config_errors_name_the_key() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let load = |text: &str| {
        let path = write_config(&dir, text);
        Config::load(&path).map(|_| ()).unwrap_err().to_string()
    };
    let e = load("[handlers.h]\nurl = \"https://app/jobs\"\ncommand = [\"true\"]\n");
    assert!(
        e.contains("handlers.h") && e.contains("`url`") && e.contains("`command`"),
        "{e}"
    );
    let e =
        load("[handlers.h]\nurl = \"https://app/jobs\"\nparams = [\"a\"]\ntransactional = true\n");
    assert!(e.contains("`params`, `transactional`"), "{e}");
    let e = load("[handlers.h]\nurl = \"ftp://files/jobs\"\n");
    assert!(
        e.contains("handlers.h") && e.contains("url") && e.contains("ftp"),
        "{e}"
    );
    let e = load("[handlers.h]\nurl = \"https://me:pw@app/jobs\"\n");
    assert!(e.contains("user info"), "{e}");
    let e = load("[handlers.h]\ncommand = [\"true\"]\nsecret_file = \"/k\"\n");
    assert!(e.contains("secret_file") && e.contains("`url`"), "{e}");
    let e = load("[handlers.h]\nurl = \"https://app/jobs\"\nretry_statuses = [500]\n");
    assert!(e.contains("retry_statuses") && e.contains("500"), "{e}");

    // A missing secret file passes the load (files are read when a worker starts) and stops the
    // worker at start, naming the kind, the key and the path.
    let missing = dir.join("missing.key");
    let path = write_config(
        &dir,
        &format!("[handlers.h]\nurl = \"https://app/jobs\"\nsecret_file = {missing:?}\n"),
    );
    let config = Config::load(&path).expect("loads");
    let e = config.handlers(&db.pool).unwrap_err().to_string();
    assert!(
        e.contains("handlers.h") && e.contains("secret_file") && e.contains("missing.key"),
        "{e}"
    );
    let out = run_jobq(
        Some(&db.url),
        &["worker", "--config", path.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("handlers.h")
            && stderr.contains("secret_file")
            && stderr.contains("missing.key"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------------
// The signature verifiers of clients/<language>/ and the docs that show them
// ---------------------------------------------------------------------------------------------------

/// A verifier: the variable naming its interpreter (as `scripts/test.sh` sets it), the interpreter
/// otherwise, the file, and the fence of its block in docs/http-handlers.md.
struct Verifier {
    env: &'static str,
    default: &'static str,
    file: &'static str,
    fence: &'static str,
}

const VERIFIERS: [Verifier; 4] = [
    Verifier {
        env: "JOBQ_PYTHON",
        default: "/usr/bin/python3",
        file: "clients/python/verify_signature.py",
        fence: "python",
    },
    Verifier {
        env: "JOBQ_NODE",
        default: "/usr/bin/node",
        file: "clients/node/verify_signature.js",
        fence: "js",
    },
    Verifier {
        env: "JOBQ_PHP",
        default: "/usr/bin/php",
        file: "clients/php/verify_signature.php",
        fence: "php",
    },
    Verifier {
        env: "JOBQ_RUBY",
        default: "/usr/bin/ruby",
        file: "clients/ruby/verify_signature.rb",
        fence: "ruby",
    },
];

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Verifier {
    fn interpreter(&self) -> Option<std::path::PathBuf> {
        if let Some(p) = std::env::var_os(self.env) {
            return Some(p.into());
        }
        if std::path::Path::new(self.default).exists() {
            return Some(self.default.into());
        }
        eprintln!(
            "SKIPPED: {}: {} is missing and {} is unset (scripts/ensure-languages.sh installs it)",
            self.file, self.default, self.env
        );
        None
    }

    /// Runs the verifier on `body` and `header`; true when it exits 0.
    fn accepts(
        &self,
        interpreter: &std::path::Path,
        secret_file: &std::path::Path,
        header: &str,
        body: &[u8],
    ) -> bool {
        use std::io::Write;
        let mut child = std::process::Command::new(interpreter)
            .arg(root().join(self.file))
            .arg(secret_file)
            .arg(header)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: cannot run {interpreter:?}: {e}", self.file));
        child.stdin.take().unwrap().write_all(body).unwrap();
        let out = wait_output(child, Duration::from_secs(30));
        if !out.status.success() {
            eprintln!(
                "{}: {}",
                self.file,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        out.status.success()
    }
}

#[tokio::test]
async fn http_the_verifiers_in_four_languages_accept_jobq_s_signature_and_refuse_tampering_and_replays()
 {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let secret_file = dir.join("app.key");
    std::fs::write(&secret_file, "whsec_languages\n").unwrap();
    let app = App::answering(reply(200)).await;
    // Non-ASCII text in the payload: the HMAC covers bytes, not characters.
    enqueue(
        &db,
        "signed",
        serde_json::json!({"text": "héllo wörld", "n": 1}),
    )
    .await;
    let config = handler(
        "signed",
        &app.url(),
        &format!("secret_file = {secret_file:?}"),
    );
    drain(&db, &config).await;
    let request = app.received().remove(0);
    let (header, body) = (
        request.header(sign::HEADER).to_string(),
        request.body.to_vec(),
    );
    let tampered = String::from_utf8(body.clone())
        .unwrap()
        .replace("\"n\":1", "\"n\":2")
        .into_bytes();
    assert_ne!(tampered, body);
    let old = sign::signature(
        b"whsec_languages",
        chrono::Utc::now().timestamp() - 600,
        &body,
    );
    let wrong_secret = sign::signature(b"whsec_other", chrono::Utc::now().timestamp(), &body);
    let mut ran = 0;
    for v in &VERIFIERS {
        let Some(interpreter) = v.interpreter() else {
            continue;
        };
        assert!(
            v.accepts(&interpreter, &secret_file, &header, &body),
            "{}: a real request",
            v.file
        );
        assert!(
            !v.accepts(&interpreter, &secret_file, &header, &tampered),
            "{}: a tampered body",
            v.file
        );
        assert!(
            !v.accepts(&interpreter, &secret_file, &old, &body),
            "{}: ten minutes old",
            v.file
        );
        assert!(
            !v.accepts(&interpreter, &secret_file, &wrong_secret, &body),
            "{}: another secret",
            v.file
        );
        ran += 1;
    }
    eprintln!("{ran} of 4 verifiers ran");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn http_the_docs_show_the_verifiers_as_they_are() {
    let doc = std::fs::read_to_string(root().join("docs/http-handlers.md")).unwrap();
    for v in &VERIFIERS {
        let file = std::fs::read_to_string(root().join(v.file)).unwrap();
        let block = format!("```{}\n{file}```\n", v.fence);
        assert!(
            doc.contains(&block),
            "docs/http-handlers.md must show {} whole, in a ```{} block, exactly as the file is",
            v.file,
            v.fence
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// TLS: a private CA through ca_file, and HTTP/2 where the server offers it
// ---------------------------------------------------------------------------------------------------

/// An HTTPS application on 127.0.0.1 with a certificate for `localhost` signed by a CA of its own,
/// offering h2 and http/1.1; it answers 200 and records the protocol each connection chose.
async fn tls_app(dir: &std::path::Path) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "jobq test app CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.join("app-ca.pem"), ca.pem()).unwrap();
    let other = CertificateParams::default();
    let other = CertifiedIssuer::self_signed(other, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join("other-ca.pem"), other.pem()).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let protocols: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = protocols.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake here.
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                let service = hyper::service::service_fn(|_req: hyper::Request<Incoming>| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                let io = TokioIo::new(tls);
                if alpn.as_deref() == Some(b"h2") {
                    seen.lock().unwrap().push("h2".into());
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, service)
                    .await;
                } else {
                    seen.lock().unwrap().push("http/1.1".into());
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    (addr, protocols)
}

#[tokio::test]
async fn http_tls_trusts_the_ca_file_only_and_speaks_http2_when_offered() {
    let db = TestDb::new().await;
    let dir = scratch_dir();
    let (addr, protocols) = tls_app(&dir).await;
    let url = format!("https://localhost:{}/jobs", addr.port());
    let config = [
        handler(
            "private",
            &url,
            &format!("ca_file = {:?}", dir.join("app-ca.pem")),
        ),
        handler("public", &url, ""),
        handler(
            "other",
            &url,
            &format!("ca_file = {:?}", dir.join("other-ca.pem")),
        ),
    ]
    .concat();
    let mut ids = Vec::new();
    for kind in ["private", "private", "public", "other"] {
        ids.push(enqueue(&db, kind, serde_json::json!({})).await);
    }
    drain(&db, &config).await;
    for id in &ids[..2] {
        assert_eq!(job(&db, *id).await.state, State::Done);
    }
    for id in &ids[2..] {
        let j = job(&db, *id).await;
        assert_eq!((j.state, j.attempts), (State::Retry, 1), "{j:?}");
        let e = last_error(&j);
        assert!(
            e.contains("certificate") || e.contains("UnknownIssuer"),
            "{e}"
        );
    }
    let protocols = protocols.lock().unwrap().clone();
    assert!(
        !protocols.is_empty() && protocols.iter().all(|p| p == "h2"),
        "the client chose HTTP/2 when offered: {protocols:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
