//! Protocol v1 between jobq and a process handler's program, as pure functions: the request line jobq
//! writes, and the checks of every line the program writes (its hello and its answers). The exact rules
//! are in `docs/process-protocol.md`; each rule has a test below.

use std::time::Duration;

use chrono::SecondsFormat;
use serde_json::{Map, Value};

use crate::handler::{JobContext, JobError};

/// The protocol version this jobq speaks.
pub const VERSION: u64 = 1;

/// The longest line a program may write, newline excluded. An answer is a few fields and an error
/// message; anything longer is a program writing something else to stdout.
pub(crate) const MAX_LINE: usize = 1 << 20;

use crate::db::report::MAX_MESSAGE;

/// How many bytes of a line that is not the protocol go into the error message.
const SHOWN: usize = 200;

/// What the program answered about one job.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// `{"id":N,"ok":true}`; `finished`: it finished the job itself with `jobq_finish`; `output`: the
    /// JSON it leaves on the job.
    Ok {
        finished: bool,
        output: Option<Value>,
    },
    /// `{"id":N,"ok":false,"error":"…"}`, with `retry_in` or `fatal`.
    Failed {
        error: String,
        retry_in: Option<Duration>,
        fatal: bool,
    },
    /// `{"id":N,"snooze":"5m"}`.
    Snooze(Duration),
}

impl Answer {
    /// What the handler returns for this answer (`job` records its output, and learns about an
    /// application finish).
    pub(crate) async fn into_result(self, job: &JobContext) -> Result<(), JobError> {
        match self {
            Answer::Ok { finished, output } => {
                if let Some(output) = output {
                    job.output(&output).await?;
                }
                if finished {
                    job.finished_by_application();
                }
                Ok(())
            }
            Answer::Failed {
                error, fatal: true, ..
            } => Err(JobError::fatal(error)),
            Answer::Failed {
                error,
                retry_in: Some(d),
                ..
            } => Err(JobError::retry_after(error, d)),
            Answer::Failed { error, .. } => Err(JobError::retry(error)),
            Answer::Snooze(d) => Err(JobError::snooze(d)),
        }
    }
}

/// The request line for `job`, newline included.
pub(crate) fn request(job: &JobContext) -> Result<Vec<u8>, JobError> {
    let payload: Value = serde_json::from_str(job.payload_str())
        .map_err(|e| JobError::fatal(format!("the payload is not JSON: {e}")))?;
    let ts = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
    let mut line = serde_json::json!({
        "id": job.id.0,
        "kind": job.kind,
        "queue": job.queue,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "claim": job.claim,
        "payload": payload,
        "run_at": ts(job.run_at()),
        "deadline": ts(job.deadline()),
    });
    // Only when the job has one: a job without a trace context sends the same line as before.
    if let Some(t) = job.traceparent() {
        line["traceparent"] = Value::String(t.to_string());
    }
    let mut bytes = serde_json::to_vec(&line).expect("a JSON value serialises");
    bytes.push(b'\n');
    Ok(bytes)
}

/// Checks the program's first line: `{"jobq":1,"ready":true}`.
///
/// # Errors
/// Why the line is not a v1 hello, for the error message.
pub(crate) fn hello(line: &[u8]) -> Result<(), String> {
    let mut obj = object(line)?;
    match obj.remove("jobq") {
        Some(Value::Number(n)) if n.as_u64() == Some(VERSION) => {}
        Some(Value::Number(n)) => {
            return Err(format!(
                "it speaks protocol version {n}, and this jobq speaks version {VERSION} only"
            ));
        }
        Some(other) => {
            return Err(format!(
                "\"jobq\" must be the version number 1, not {other}"
            ));
        }
        None => return Err("a hello line needs \"jobq\": 1".into()),
    }
    match obj.remove("ready") {
        Some(Value::Bool(true)) => {}
        _ => return Err("a hello line needs \"ready\": true".into()),
    }
    no_more(&obj, "a hello line")
}

/// What the program wrote while it ran job `id`: a progress report, or its answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Said {
    /// `{"id":N,"progress":37.5,"message":"…"}`: how far it has got; the answer is still to come.
    Progress {
        percent: f64,
        message: Option<String>,
    },
    /// The answer that ends the job's exchange.
    Answer(Answer),
}

/// Checks a line the program wrote while it ran job `id`: a progress report or the answer.
///
/// # Errors
/// Why the line is neither for this job, for the error message.
pub(crate) fn said(line: &[u8], id: u64) -> Result<Said, String> {
    let obj = object(line)?;
    if !obj.contains_key("progress") {
        return answer_of(obj, id).map(Said::Answer);
    }
    progress_of(obj, id)
}

/// Checks an answer for job `id` and reads it.
///
/// # Errors
/// Why the line is not a v1 answer for this job, for the error message.
#[cfg(test)]
pub(crate) fn answer(line: &[u8], id: u64) -> Result<Answer, String> {
    answer_of(object(line)?, id)
}

/// `{"id":N,"progress":P}` with an optional `"message"`.
fn progress_of(mut obj: Map<String, Value>, id: u64) -> Result<Said, String> {
    same_id(&mut obj, id)?;
    let percent = match obj.remove("progress") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(other) => return Err(format!("\"progress\" must be a number, not {other}")),
        None => unreachable!("checked by the caller"),
    };
    if !(0.0..=100.0).contains(&percent) {
        return Err(format!(
            "\"progress\" must be a percent from 0 to 100, not {percent}"
        ));
    }
    let message = match obj.remove("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() <= MAX_MESSAGE => Some(s),
        Some(Value::String(_)) => {
            return Err(format!("\"message\" is at most {MAX_MESSAGE} characters"));
        }
        Some(other) => return Err(format!("\"message\" must be a string, not {other}")),
    };
    no_more(&obj, "a progress line")?;
    Ok(Said::Progress { percent, message })
}

/// The answer's `id`, which must be the request's.
fn same_id(obj: &mut Map<String, Value>, id: u64) -> Result<(), String> {
    match obj.remove("id") {
        Some(Value::Number(n)) if n.as_u64() == Some(id) => Ok(()),
        Some(Value::Number(n)) => Err(format!("it answers for job {n}, but job {id} was sent")),
        Some(other) => Err(format!(
            "\"id\" must be the job's id (a number), not {other}"
        )),
        None => Err("an answer needs the job's \"id\"".into()),
    }
}

fn answer_of(mut obj: Map<String, Value>, id: u64) -> Result<Answer, String> {
    same_id(&mut obj, id)?;
    let ok = obj.remove("ok");
    let snooze = obj.remove("snooze");
    let answer = match (ok, snooze) {
        (Some(_), Some(_)) => return Err("an answer has \"ok\" or \"snooze\", not both".into()),
        (None, None) => return Err("an answer needs \"ok\" (true or false) or \"snooze\"".into()),
        (None, Some(d)) => {
            let d = duration(&d, "snooze")?;
            if d.is_zero() {
                return Err("\"snooze\" must be above zero".into());
            }
            crate::handler::snooze_until(d, chrono::Utc::now())?;
            Answer::Snooze(d)
        }
        (Some(Value::Bool(true)), None) => {
            let finished = match obj.remove("finished") {
                None => false,
                Some(Value::Bool(b)) => b,
                Some(other) => {
                    return Err(format!("\"finished\" must be true or false, not {other}"));
                }
            };
            Answer::Ok {
                finished,
                output: obj.remove("output"),
            }
        }
        (Some(Value::Bool(false)), None) => {
            let error = match obj.remove("error") {
                Some(Value::String(s)) if !s.trim().is_empty() => s,
                Some(Value::String(_)) => return Err("\"error\" must not be empty".into()),
                Some(other) => return Err(format!("\"error\" must be a string, not {other}")),
                None => return Err("a failure (\"ok\": false) needs an \"error\" message".into()),
            };
            let fatal = match obj.remove("fatal") {
                None => false,
                Some(Value::Bool(b)) => b,
                Some(other) => return Err(format!("\"fatal\" must be true or false, not {other}")),
            };
            let retry_in = match obj.remove("retry_in") {
                None => None,
                Some(d) => {
                    let d = duration(&d, "retry_in")?;
                    crate::handler::snooze_until(d, chrono::Utc::now())
                        .map_err(|e| format!("retry_in: {e}"))?;
                    Some(d)
                }
            };
            if fatal && retry_in.is_some() {
                return Err("\"fatal\": true and \"retry_in\" contradict each other".into());
            }
            Answer::Failed {
                error,
                retry_in,
                fatal,
            }
        }
        (Some(other), None) => return Err(format!("\"ok\" must be true or false, not {other}")),
    };
    no_more(&obj, "this answer")?;
    Ok(answer)
}

/// A line that is not the protocol, as an error message shows it: its first bytes, escaped.
pub(crate) fn shown(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let cut = &line[..line.len().min(SHOWN)];
    let more = if line.len() > SHOWN { "…" } else { "" };
    format!("{:?}{more}", String::from_utf8_lossy(cut))
}

fn object(line: &[u8]) -> Result<Map<String, Value>, String> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

fn no_more(obj: &Map<String, Value>, what: &str) -> Result<(), String> {
    match obj.keys().next() {
        None => Ok(()),
        Some(k) => Err(format!(
            "{what} has a field protocol v1 does not know: {k:?}"
        )),
    }
}

/// A duration: a string as jobq's config writes them (`"30s"`, `"5m"`, `"1h 30m"`, `"500ms"`) or a
/// number of seconds (`30`, `0.5`).
fn duration(v: &Value, field: &str) -> Result<Duration, String> {
    match v {
        Value::String(s) => humantime::parse_duration(s)
            .map_err(|e| format!("{field:?}: {s:?} is not a duration ({e})")),
        Value::Number(n) => n
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| format!("{field:?}: {n} is not a number of seconds")),
        other => Err(format!(
            "{field:?} must be a duration (\"30s\") or a number of seconds, not {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(line: &str) -> Result<Answer, String> {
        answer(line.as_bytes(), 41)
    }

    #[test]
    fn hellos() {
        assert_eq!(hello(b"{\"jobq\":1,\"ready\":true}\n"), Ok(()));
        assert_eq!(hello(b"{\"ready\":true,\"jobq\":1}\r\n"), Ok(()));
        let e = hello(b"{\"jobq\":2,\"ready\":true}").unwrap_err();
        assert!(
            e.contains("version 2") && e.contains("version 1 only"),
            "{e}"
        );
        assert!(hello(b"{\"jobq\":1}").unwrap_err().contains("ready"));
        assert!(hello(b"{\"jobq\":1,\"ready\":false}").is_err());
        assert!(hello(b"{\"jobq\":\"1\",\"ready\":true}").is_err());
        assert!(hello(b"hello").unwrap_err().contains("not JSON"));
        assert!(
            hello(b"{\"jobq\":1,\"ready\":true,\"x\":1}")
                .unwrap_err()
                .contains("\"x\"")
        );
    }

    #[test]
    fn progress_lines_come_before_the_answer() {
        let p = |l: &str| said(l.as_bytes(), 41);
        assert_eq!(
            p(r#"{"id":41,"progress":37.5,"message":"rows 375 of 1000"}"#),
            Ok(Said::Progress {
                percent: 37.5,
                message: Some("rows 375 of 1000".into())
            })
        );
        assert_eq!(
            p(r#"{"id":41,"progress":0}"#),
            Ok(Said::Progress {
                percent: 0.0,
                message: None
            })
        );
        assert!(matches!(
            p(r#"{"id":41,"ok":true}"#),
            Ok(Said::Answer(Answer::Ok { .. }))
        ));
        for (line, why) in [
            (r#"{"id":41,"progress":101}"#, "from 0 to 100"),
            (r#"{"id":41,"progress":"half"}"#, "must be a number"),
            (
                r#"{"id":41,"progress":5,"message":7}"#,
                "\"message\" must be a string",
            ),
            (r#"{"id":41,"progress":5,"ok":true}"#, "\"ok\""),
            (r#"{"id":40,"progress":5}"#, "job 40"),
        ] {
            let e = p(line).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
    }

    #[test]
    fn answers() {
        assert_eq!(
            a(r#"{"id":41,"ok":true}"#),
            Ok(Answer::Ok {
                finished: false,
                output: None
            })
        );
        assert_eq!(
            a(r#"{"id":41,"ok":true,"finished":true}"#),
            Ok(Answer::Ok {
                finished: true,
                output: None
            })
        );
        assert_eq!(
            a(r#"{"id":41,"ok":true,"output":{"rows":[1,2]}}"#),
            Ok(Answer::Ok {
                finished: false,
                output: Some(serde_json::json!({"rows": [1, 2]}))
            })
        );
        assert_eq!(
            a(r#"{"id":41,"ok":false,"error":"boom"}"#),
            Ok(Answer::Failed {
                error: "boom".into(),
                retry_in: None,
                fatal: false
            })
        );
        assert_eq!(
            a(r#"{"id":41,"ok":false,"error":"slow down","retry_in":"30s"}"#),
            Ok(Answer::Failed {
                error: "slow down".into(),
                retry_in: Some(Duration::from_secs(30)),
                fatal: false
            })
        );
        assert_eq!(
            a(r#"{"id":41,"ok":false,"error":"x","retry_in":1.5}"#).map(|x| match x {
                Answer::Failed { retry_in, .. } => retry_in,
                _ => None,
            }),
            Ok(Some(Duration::from_millis(1500)))
        );
        assert_eq!(
            a(r#"{"id":41,"ok":false,"error":"bad","fatal":true}"#),
            Ok(Answer::Failed {
                error: "bad".into(),
                retry_in: None,
                fatal: true
            })
        );
        assert_eq!(
            a(r#"{"id":41,"snooze":"5m"}"#),
            Ok(Answer::Snooze(Duration::from_secs(300)))
        );
    }

    #[test]
    fn answers_that_break_a_rule() {
        let bad = [
            (r#"{"id":42,"ok":true}"#, "job 42, but job 41"),
            (r#"{"id":"41","ok":true}"#, "\"id\" must be"),
            (r#"{"ok":true}"#, "needs the job's \"id\""),
            (r#"{"id":41}"#, "needs \"ok\""),
            (r#"{"id":41,"ok":"yes"}"#, "\"ok\" must be"),
            (r#"{"id":41,"ok":true,"snooze":"1s"}"#, "not both"),
            (r#"{"id":41,"ok":false}"#, "needs an \"error\""),
            (r#"{"id":41,"ok":false,"error":""}"#, "must not be empty"),
            (r#"{"id":41,"ok":false,"error":5}"#, "must be a string"),
            (
                r#"{"id":41,"ok":false,"error":"x","fatal":true,"retry_in":"1s"}"#,
                "contradict",
            ),
            (
                r#"{"id":41,"ok":false,"error":"x","retry_in":"soon"}"#,
                "not a duration",
            ),
            (
                r#"{"id":41,"ok":false,"error":"x","retry_in":-1}"#,
                "number of seconds",
            ),
            (
                r#"{"id":41,"ok":true,"error":"x"}"#,
                "does not know: \"error\"",
            ),
            (
                r#"{"id":41,"ok":true,"finished":1}"#,
                "\"finished\" must be",
            ),
            (r#"{"id":41,"snooze":"0s"}"#, "above zero"),
            (r#"{"id":41,"snooze":"100years"}"#, "TIMESTAMP"),
            (r#"{"id":41,"snooze":"1m","error":"x"}"#, "does not know"),
            (
                r#"{"id":41,"ok":true,"note":"x"}"#,
                "does not know: \"note\"",
            ),
            (r#"[41,true]"#, "not a JSON object"),
            ("resized 3 images", "not JSON"),
            ("", "not JSON"),
        ];
        for (line, want) in bad {
            let e = a(line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn requests_carry_the_job_and_its_times() {
        let job = JobContext::for_test("resize", r#"{"w":10}"#);
        let line = request(&job).unwrap();
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["id"], 1);
        assert_eq!(v["kind"], "resize");
        assert_eq!(v["payload"]["w"], 10);
        assert_eq!(v["claim"], "test");
        assert!(v["deadline"].as_str().unwrap().ends_with('Z'));
        assert!(v["run_at"].as_str().unwrap().ends_with('Z'));
        let bad = JobContext::for_test("resize", "{not json");
        assert!(request(&bad).unwrap_err().is_fatal());
    }

    #[test]
    fn shown_lines_are_cut_and_escaped() {
        assert_eq!(shown(b"hi\n"), "\"hi\"");
        let long = vec![b'x'; 500];
        let s = shown(&long);
        assert!(s.ends_with('…') && s.len() < 220, "{s}");
    }
}
