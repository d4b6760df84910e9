//! Job spans exported over OTLP/HTTP (the `otel` feature): an OTLP receiver runs here, on
//! 127.0.0.1:0, and `jobq worker` exports to it through the standard `OTEL_EXPORTER_OTLP_ENDPOINT`. A
//! job's span carries its enqueuer's trace id and parent span id, its id, kind, queue, attempt and
//! outcome; a failed attempt's span has an error status; the command continues the job's span.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};
use prost::Message;

use crate::common::{TestDb, jobq, scratch_dir, wait_output, write_config};
use crate::traces::PARENT;

/// An OTLP/HTTP receiver: every span of every `POST /v1/traces` it was sent, in order.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let req =
                        ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
                    let mut kept = kept.lock().unwrap();
                    for rs in req.resource_spans {
                        for ss in rs.scope_spans {
                            kept.extend(ss.spans);
                        }
                    }
                    // An empty ExportTraceServiceResponse: zero bytes of protobuf.
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, spans }
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A span's attributes as text (ints and strings are what jobq sets).
fn attributes(span: &Span) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(i)) => i.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

/// Runs `jobq worker` (draining) with `config`, exporting to `receiver`; it flushes its spans before
/// it exits.
async fn drain_exporting(db: &TestDb, config: &std::path::Path, receiver: &Receiver) {
    let mut cmd = jobq(
        Some(&db.url),
        &["worker", "--config", config.to_str().unwrap()],
    );
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let out =
        tokio::task::spawn_blocking(move || wait_output(child, std::time::Duration::from_secs(60)))
            .await
            .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A job enqueued from plain SQL under a trace: its span is a child of the enqueuer's span, with the
/// job's facts and outcome, and the command runs under the job's span (same trace, the span's id).
#[tokio::test]
async fn a_jobs_span_arrives_as_a_child_of_its_enqueuer_with_the_jobs_facts() {
    let db = TestDb::new().await;
    let receiver = Receiver::start().await;
    db.exec(&format!(
        "INSERT INTO job_queue (kind, queue, traceparent) VALUES ('cmd', 'mail', '{PARENT}')"
    ))
    .await;
    let dir = scratch_dir();
    let script = "printf '%s' \"$TRACEPARENT\" > \"$OUT/seen\"";
    let config = write_config(
        &dir,
        &format!(
            "[worker]\nqueues = [\"mail\"]\n\n\
             [handlers.cmd]\ncommand = [\"sh\", \"-c\", {script:?}]\nenv = {{ OUT = {:?} }}\n",
            dir.to_str().unwrap()
        ),
    );
    drain_exporting(&db, &config, &receiver).await;

    let spans = receiver.spans();
    assert_eq!(spans.len(), 1, "{spans:?}");
    let span = &spans[0];
    assert_eq!(span.name, "jobq.job cmd");
    assert_eq!(span.kind, SpanKind::Consumer as i32);
    assert_eq!(hex(&span.trace_id), &PARENT[3..35], "the enqueuer's trace");
    assert_eq!(
        hex(&span.parent_span_id),
        &PARENT[36..52],
        "the enqueuer's span"
    );
    let attrs = attributes(span);
    for (key, want) in [
        ("jobq.job.id", "1"),
        ("jobq.job.kind", "cmd"),
        ("jobq.queue", "mail"),
        ("jobq.attempt", "1"),
        ("jobq.outcome", "done"),
    ] {
        assert_eq!(
            attrs.get(key).map(String::as_str),
            Some(want),
            "{key}: {attrs:?}"
        );
    }
    assert_ne!(
        span.status.as_ref().map_or(0, |s| s.code),
        StatusCode::Error as i32
    );
    // The command continues the job's span: its own spans nest under the job.
    let seen = std::fs::read_to_string(dir.join("seen")).unwrap();
    assert_eq!(
        seen,
        format!("00-{}-{}-01", &PARENT[3..35], hex(&span.span_id)),
        "TRACEPARENT is the job span's context"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Failed attempts: an error status with the failure's message, and the outcome retry, then dead.
#[tokio::test]
async fn a_failed_attempts_span_has_an_error_status_and_its_outcome() {
    let db = TestDb::new().await;
    let receiver = Receiver::start().await;
    db.exec(&format!(
        "INSERT INTO job_queue (kind, max_attempts, traceparent) VALUES \
         ('fail', 1, '{PARENT}'), ('fail', 5, '{PARENT}')"
    ))
    .await;
    let dir = scratch_dir();
    let config = write_config(
        &dir,
        "[handlers.fail]\ncommand = [\"sh\", \"-c\", \"echo broken >&2; exit 3\"]\n",
    );
    drain_exporting(&db, &config, &receiver).await;

    let by_job: BTreeMap<String, BTreeMap<String, String>> = receiver
        .spans()
        .iter()
        .filter(|s| attributes(s)["jobq.attempt"] == "1")
        .map(|s| {
            let status = s.status.clone().unwrap_or_default();
            assert_eq!(status.code, StatusCode::Error as i32, "{s:?}");
            assert!(status.message.contains("broken"), "{status:?}");
            assert_eq!(hex(&s.trace_id), &PARENT[3..35]);
            let attrs = attributes(s);
            (attrs["jobq.job.id"].clone(), attrs)
        })
        .collect();
    assert_eq!(by_job["1"]["jobq.outcome"], "dead", "{by_job:?}");
    assert_eq!(by_job["2"]["jobq.outcome"], "retry", "{by_job:?}");
    std::fs::remove_dir_all(&dir).ok();
}
